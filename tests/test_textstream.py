"""Streaming text: whole characters only; stop strings never shown."""

from engine.runtime.textstream import TextStream


def _stream_all(loaded, text, stop=()):
    ids = loaded.tokenizer.encode(text, add_special_tokens=False)
    stream = TextStream(loaded.tokenizer, stop)
    deltas = [stream.add(t)[0] for t in ids]
    if not stream.stopped:
        deltas.append(stream.finish()[0])
    return deltas, stream


def test_multibyte_characters_are_never_split(tiny_loaded):
    text = "café 東京 🙂 naïve"
    deltas, stream = _stream_all(tiny_loaded, text)
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_stop_string_is_cut_and_held_back(tiny_loaded):
    deltas, stream = _stream_all(tiny_loaded, "hello world, how are you", stop=("how",))
    assert stream.stopped
    assert "".join(deltas) == "hello world, "
    assert stream.text == "hello world, "


def test_text_that_only_starts_a_stop_string_is_released(tiny_loaded):
    deltas, stream = _stream_all(tiny_loaded, "the quick brown fox", stop=("quiet",))
    assert not stream.stopped
    assert "".join(deltas) == "the quick brown fox"
