"""A reasoning model's thinking, apart from its answer: in the engine's
events, the API's `reasoning_content` and the app's Thinking block; kept out
of the next turn. The models are tiny llamas whose weights make them say a
script (tests/scripted_model.py): real forward passes, known output."""

import pytest
from PySide6.QtCore import QUrl

from engine import Engine, LaneSpec, SamplingParams, Token
from engine.models.loader import load_model
from tests.scripted_model import R1_LIKE, build_scripted_model

THOUGHT, ANSWER = "the quick brown", "hello world"


@pytest.fixture(scope="module")
def qwen3_like(tmp_path_factory):
    """Writes its own <think>, as Qwen3 does."""
    return build_scripted_model(tmp_path_factory.mktemp("think"),
                                f"<think>{THOUGHT}</think>{ANSWER}")


@pytest.fixture(scope="module")
def r1_like(tmp_path_factory):
    """Its template opens <think> for it, as DeepSeek-R1's distills' do."""
    return build_scripted_model(tmp_path_factory.mktemp("r1"), f"{THOUGHT}</think>{ANSWER}",
                                R1_LIKE)


def _engine(path):
    return Engine(load_model(str(path)), lanes=[LaneSpec("cpu", "cpu", "float32")])


@pytest.mark.parametrize("model", ["qwen3_like", "r1_like"])
def test_thinking_comes_apart_from_the_answer(model, request):
    engine = _engine(request.getfixturevalue(model))
    try:
        assert engine.thinks
        seen = []
        engine.subscribe(lambda e: seen.append(e) if isinstance(e, Token) else None)
        for params in (SamplingParams(max_tokens=30),  # greedy and sampled alike
                       SamplingParams(max_tokens=30, temperature=0.9, top_p=0.95, seed=3)):
            seen.clear()
            done = engine.generate([{"role": "user", "content": "hi there"}], params, timeout=60)
            assert done.reason == "stop"
            assert (done.reasoning, done.text) == (THOUGHT, ANSWER)  # markers stripped
            assert "".join(t.reasoning for t in seen) == THOUGHT
            assert "".join(t.text for t in seen) == ANSWER
        # Cut while thinking: all of it is thinking, no answer yet.
        cut = engine.generate([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=3))
        assert cut.reason == "length" and cut.text == "" and THOUGHT.startswith(cut.reasoning)
        assert cut.reasoning
        # A raw prompt (the API's /v1/completions) is not split.
        ids = engine.render([{"role": "user", "content": "hi"}])
        raw = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=30),
                            thinking=False).result(60)
        assert raw.reasoning == "" and raw.text.endswith(f"{THOUGHT}</think>{ANSWER}")
    finally:
        engine.close()


def test_a_model_that_does_not_think_has_no_reasoning(make_engine):
    engine = make_engine()
    assert not engine.thinks
    done = engine.generate([{"role": "user", "content": "hello world"}],
                           SamplingParams(max_tokens=8), timeout=60)
    assert done.reasoning == "" and done.text


def test_the_api_returns_reasoning_content(qwen3_like):
    from tests.test_server import Served

    engine = _engine(qwen3_like)
    served = Served(engine)
    try:
        client = served.client()
        messages = [{"role": "user", "content": "hi there"}]
        done = client.chat.completions.create(model="tiny", messages=messages, max_tokens=30)
        message = done.choices[0].message
        assert message.content == ANSWER
        assert message.model_extra["reasoning_content"] == THOUGHT
        thought, answer = [], []
        for chunk in client.chat.completions.create(model="tiny", messages=messages,
                                                    max_tokens=30, stream=True):
            if chunk.choices:
                delta = chunk.choices[0].delta
                thought.append((delta.model_extra or {}).get("reasoning_content") or "")
                answer.append(delta.content or "")
        assert "".join(thought) == THOUGHT and "".join(answer) == ANSWER
        # Raw completions give the text as the model wrote it.
        text = client.completions.create(model="tiny", prompt="hi", max_tokens=30)
        assert "reasoning_content" not in (text.choices[0].model_extra or {})
        # The next turn carries the answer only (the template's way: its
        # content); thinking sent back by a client is the client's choice.
        follow = messages + [{"role": "assistant", "content": message.content},
                             {"role": "user", "content": "and then?"}]
        again = client.chat.completions.create(model="tiny", messages=follow, max_tokens=30)
        assert again.usage.prompt_tokens_details.cached_tokens > 0
    finally:
        served.stop()
        engine.close()


def test_the_app_folds_thinking_into_a_line_stores_it_and_keeps_it_out_of_the_next_turn(
        qtbot, qwen3_like, tmp_path):
    from tests.windows import open_window, paced_cpu_engine

    # Steps of 30 ms: the thoughts stream for a while before the answer.
    window = open_window(qtbot, qwen3_like, tmp_path / "think.db", paced_cpu_engine(0.03))
    tab = window.chat_tabs()[0]
    window.show()
    tab.composer.setPlainText("hi there")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    answer = tab.conversation.messages[-1]
    assert (answer["content"], answer["reasoning"]) == (ANSWER, THOUGHT)
    assert answer["thinking_s"] is not None and answer["thinking_s"] >= 0
    shown = tab.transcript.toPlainText()
    assert "▸ Thought for" in shown and ANSWER in shown and THOUGHT not in shown  # folded
    tab.transcript.anchorClicked.emit(QUrl(tab.transcript.action_href("think", 1)))
    assert THOUGHT in tab.transcript.toPlainText() and "▾ Thought for" in \
        tab.transcript.toPlainText()
    stored = window.store.messages(tab.chat_id)[-1]
    assert (stored.content, stored.reasoning) == (ANSWER, THOUGHT)
    assert stored.stats["thinking_s"] == pytest.approx(answer["thinking_s"])
    # The next turn: the history sends the answer, not the thoughts.
    assert tab.prompt_messages()[-1] == {"role": "assistant", "content": ANSWER}
    seen = []
    window.engine.subscribe(lambda e: seen.append(e) if type(e).__name__ == "Queued" else None)
    tab.composer.setPlainText("and then?")
    tab.send()
    qtbot.waitUntil(lambda: not tab.is_streaming, timeout=30_000)
    ids = window.engine.render(tab.prompt_messages()[:-1])
    assert THOUGHT not in window.engine.tokenizer.decode(ids)
    assert seen and seen[-1].prompt_tokens == len(ids)
    window.close()
    # Reopened: the thoughts are there, folded, with their time.
    again = open_window(qtbot, qwen3_like, tmp_path / "think.db")
    restored = again.chat_tabs()[0]
    assert restored.conversation.messages[1]["reasoning"] == THOUGHT
    assert "▸ Thought for" in restored.transcript.toPlainText()
    again.close()


def test_thoughts_stream_then_fold_when_the_answer_starts(qtbot):
    from app.chat.chat_tab import ChatTab
    from app.conversation.conversation import Answer, Conversation

    tab = ChatTab(conversation=Conversation([{"role": "user", "content": "hi", "id": 1}]))
    qtbot.addWidget(tab)
    tab.show()
    tab.conversation.answer = Answer()  # an answer is being written
    tab.append_reasoning("\nFirst I look.\n\nThen I ")
    tab.append_reasoning("decide.")
    shown = tab.transcript.toPlainText()
    assert "Thinking…" in shown and "First I look." in shown and "Then I decide." in shown
    tab.append_text("The answer.")
    shown = tab.transcript.toPlainText()
    assert "▸ Thought for" in shown and "The answer." in shown and "First I look." not in shown
    assert tab.conversation.answer.thinking_s is not None


def test_gpt_oss_channels_are_thinking_and_answer(tmp_path):
    """gpt-oss writes its thinking in the harmony format's analysis channel
    and its answer in the final one (the markers are special tokens, in the
    decoded text): the same split, through a tokenizer with those tokens."""
    from mlx_lm.tokenizer_utils import load as load_tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from engine.runtime.textstream import TextStream, thinking_format
    from tests.tiny_model import CORPUS

    harmony = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"] + harmony, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|return|>").save_pretrained(
        tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    fmt = thinking_format(tokenizer)
    assert fmt is not None
    out = (f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
           f"<|start|>assistant<|channel|>final<|message|>{ANSWER}")
    stream = TextStream(tokenizer, (), fmt, tokenizer.encode("<|start|>assistant"))
    parts = [stream.add(t) for t in tokenizer.encode(out)] + [stream.finish()]
    assert "".join(p[0] for p in parts) == ANSWER
    assert "".join(p[1] for p in parts) == stream.reasoning == THOUGHT
