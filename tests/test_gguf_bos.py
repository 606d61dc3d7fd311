"""BOS and EOS as a GGUF's metadata says, by llama.cpp's rules
(engine/models/gguf/vocab.py), on files written the way published ones are
(tests/gguf_files.py); a byte-level BPE ('gpt2') GGUF that asks for a BOS
completes as the reference does; metadata of the wrong shape is a clear error;
numbers that `mx.load` gives as MLX arrays (the sampling defaults) are read."""

from types import SimpleNamespace

import pytest

from engine import Engine, EngineError, LaneSpec, SamplingParams, load_model
from engine.models.gguf.meta import read_metadata
from engine.models.gguf.tokenizer import build_tokenizer
from tests.families import build_family
from tests.gguf_files import build_spm_folder, write_gguf
from tests.helpers import reference_greedy

TEXT = "The capital of France is"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A SentencePiece llama and a byte-level BPE llama, each as a Hugging Face
    folder (the reference) and as the GGUF llama.cpp's converter makes of it."""
    import json

    from tokenizers import Tokenizer, processors

    root = tmp_path_factory.mktemp("bos")
    spm = build_spm_folder("llama", root / "spm")
    bpe = build_family("llama", root / "bpe")
    # A BOS as Llama 3's folder adds it: tokenizer.json's post-processor.
    tok = Tokenizer.from_file(str(bpe / "tokenizer.json"))
    bos = ("<|endoftext|>", tok.token_to_id("<|endoftext|>"))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos[0]} $A", pair=f"{bos[0]} $A {bos[0]} $B:1", special_tokens=[bos])
    tok.save(str(bpe / "tokenizer.json"))
    config = json.loads((bpe / "tokenizer_config.json").read_text())
    (bpe / "tokenizer_config.json").write_text(json.dumps(config | {"bos_token": bos[0]}))
    return SimpleNamespace(spm=spm, bpe=bpe,
                           spm_gguf=write_gguf(spm, root / "spm.gguf", "llama"),
                           bpe_gguf=write_gguf(bpe, root / "bpe.gguf", "llama", vocab="gpt2"))


def _ids(meta: dict, **changes) -> list[int]:
    """The ids of TEXT with special tokens added, the file's metadata changed
    (None: the key absent, as from a converter that did not write it)."""
    meta = {**meta, **{f"tokenizer.ggml.{k}": v for k, v in changes.items()}}
    meta = {k: v for k, v in meta.items() if v is not None}
    return build_tokenizer(meta).encode(TEXT)


def test_sentencepiece_adds_bos_unless_the_file_says_not(files):
    meta = read_metadata(files.spm_gguf)
    plain = _ids(meta, add_bos_token=False)
    assert 1 not in plain  # <s>
    assert _ids(meta) == [1] + plain  # the file says add_bos_token true
    assert _ids(meta, add_bos_token=None) == [1] + plain  # llama.cpp's SPM default
    assert _ids(meta, add_bos_token=None, bos_token_id=None) == [1] + plain  # its default id
    assert _ids(meta, add_bos_token=None, bos_token_id=10**6) == [1] + plain
    assert _ids(meta, add_eos_token=True) == [1] + plain + [2]
    assert _ids(meta, add_bos_token=False, add_eos_token=True) == plain + [2]


@pytest.mark.parametrize("pre, adds", [("gpt-2", False), ("default", False), ("smollm", False),
                                       ("qwen2", False), ("llama-bpe", True), ("tekken", True)])
def test_byte_level_bpe_adds_bos_after_llama_cpp_s_pre_rules(files, pre, adds):
    meta = read_metadata(files.bpe_gguf)
    bos = meta["tokenizer.ggml.bos_token_id"]
    ids = _ids(meta, pre=pre, add_bos_token=None)
    assert (ids[0] == bos) is adds and ids.count(bos) == int(adds)
    assert _ids(meta, pre=pre, add_bos_token=True)[0] == bos
    assert bos not in _ids(meta, pre=pre, add_bos_token=False)


def test_adding_a_token_the_file_does_not_name_is_an_error(files):
    meta = read_metadata(files.bpe_gguf)
    with pytest.raises(EngineError, match="add a BOS token.*bos_token_id is missing") as e:
        _ids(meta, bos_token_id=None)
    assert e.value.kind == "corrupt-model"
    with pytest.raises(EngineError, match="add a EOS token.*eos_token_id is missing"):
        _ids(meta, add_eos_token=True, eos_token_id=None)
    assert _ids(meta, bos_token_id=None, add_bos_token=False)  # nothing to add: fine


def test_a_byte_level_gguf_completes_as_the_reference_does(files):
    from mlx_lm import load as mlx_lm_load

    assert read_metadata(files.bpe_gguf)["tokenizer.ggml.add_bos_token"] is True  # converted
    ref_model, ref_tok = mlx_lm_load(str(files.bpe))
    reference = SimpleNamespace(model=ref_model, stop_token_ids=set(ref_tok.eos_token_ids))
    engine = Engine(load_model(str(files.bpe_gguf), weight_format="float32"),
                    lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        bos = engine.tokenizer.bos_token_id
        for text in (TEXT, "hello world, how are you today?"):
            expected = ref_tok._tokenizer.encode(text)
            assert expected[0] == bos == ref_tok.convert_tokens_to_ids("<|endoftext|>")
            prepared = engine.prepare_prompt(text)
            assert prepared.prompt_ids == expected
            handle = engine.submit(prepared, SamplingParams(max_tokens=12))
            handle.result(60)
            assert handle.request.output_ids == reference_greedy(reference, expected, 12)
        chat = [{"role": "user", "content": TEXT}]  # its template spells no BOS: none
        assert engine.prepare(chat).prompt_ids == list(
            ref_tok.apply_chat_template(chat, add_generation_prompt=True))
    finally:
        engine.close()


@pytest.mark.parametrize("key, value, says", [
    ("scores", [0.0] * 10, "'tokenizer.ggml.scores' is a list of 10 values, not a number for"),
    ("scores", "high", "'tokenizer.ggml.scores' is str 'high'"),
    ("token_type", ["control"] * 600, "'tokenizer.ggml.token_type' is a list of 600 values"),
    ("tokens", None, "'tokenizer.ggml.tokens' is missing"),
    ("tokens", ["a", "b", "a"], "holds the token 'a' twice"),
    ("add_bos_token", 1, "'tokenizer.ggml.add_bos_token' is int 1, not true or false"),
    ("bos_token_id", "1", "'tokenizer.ggml.bos_token_id' is str '1', not a whole number"),
])
def test_metadata_of_the_wrong_shape_is_a_clear_error(files, key, value, says):
    meta = read_metadata(files.spm_gguf)
    with pytest.raises(EngineError, match=says.replace("(", r"\(")) as e:
        _ids(meta, **{key: value})
    assert e.value.kind == "corrupt-model"


def test_a_damaged_vocabulary_fails_the_load_clearly(files, tmp_path):
    path = write_gguf(files.spm, tmp_path / "short.gguf", "llama",
                      metadata={"tokenizer.ggml.scores": [0.0] * 10})
    with pytest.raises(EngineError, match="tokenizer.ggml.scores"):
        load_model(str(path))


def test_sampling_defaults_read_through_mx_load(files, tmp_path):
    """A float32 file loads through `mx.load`, whose numbers are MLX arrays."""
    path = write_gguf(files.spm, tmp_path / "sampling.gguf", "llama",
                      metadata={"general.sampling.temp": 0.25, "general.sampling.top_k": 64})
    defaults = load_model(str(path)).generation_defaults
    assert (defaults.temperature, defaults.top_k) == (0.25, 64)
    assert "GGUF" in defaults.source
