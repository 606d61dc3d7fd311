"""SentencePiece GGUFs written the way published ones are (tests/gguf_files.py:
a tokenizer.model trained with `sentencepiece`, converted as llama.cpp's
convert_hf_to_gguf.py converts Llama 2 and Gemma 3, so the scores and token
types are typed arrays in the file) load through either GGUF reader, tokenize
as SentencePiece and llama.cpp do with the BOS their metadata asks for, and
complete as the same weights do in mlx-lm with the Hugging Face tokenizer of
the same tokenizer.model."""

import random
from types import SimpleNamespace

import gguf
import mlx.core as mx
import pytest

from engine import Engine, LaneSpec, SamplingParams, load_model
from engine.models.gguf.meta import read_metadata
from engine.models.gguf.tokenizer import build_tokenizer
from tests.gguf_files import build_spm_folder, llama_cpp_spm, write_gguf
from tests.helpers import reference_greedy

FAMILIES = {"llama": "llama", "gemma3_text": "gemma3"}
TEXTS = ["hello world", "The capital of France is", " The capital of France is",
         "  leading spaces", "trailing  ", "new\nlines\n\nend\n", "tab\there", "   ", "a", "",
         "café naïve système", "東京 🙂 emoji", "numbers 0123456789", '<b>html</b> & {"j": 1}']
PROMPTS = ["The capital of France is", "hello world, how are you", "café système 東京 42"]
READERS = {"mx.load": lambda path: mx.load(str(path), return_metadata=True)[1],
           "metadata walk": read_metadata}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("spm")
    out = {}
    for family, arch in FAMILIES.items():
        folder = build_spm_folder(family, root / family)
        out[family] = SimpleNamespace(
            folder=folder, arch=arch, gguf=write_gguf(folder, root / f"{family}.gguf", arch),
            sp=spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model")))
    return out


def test_the_files_hold_typed_arrays_as_published_ones_do(files):
    for f in files.values():
        reader = gguf.GGUFReader(f.gguf)
        for key, kind in (("tokenizer.ggml.scores", gguf.GGUFValueType.FLOAT32),
                          ("tokenizer.ggml.token_type", gguf.GGUFValueType.INT32)):
            assert reader.get_field(key).types == [gguf.GGUFValueType.ARRAY, kind]
        meta = mx.load(str(f.gguf), return_metadata=True)[1]
        assert isinstance(meta["tokenizer.ggml.scores"], mx.array)
        assert meta["tokenizer.ggml.add_bos_token"].item() is True
    assert mx.load(str(files["gemma3_text"].gguf), return_metadata=True)[1][
        "tokenizer.ggml.add_space_prefix"].item() is False


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizes_as_sentencepiece_and_llama_cpp_with_bos(files, family, reader):
    f = files[family]
    meta = READERS[reader](f.gguf)
    tok = build_tokenizer(meta)
    walked = read_metadata(f.gguf)
    tokens, scores = walked["tokenizer.ggml.tokens"], walked["tokenizer.ggml.scores"]
    prefix = family == "llama"  # gemma's file says add_space_prefix false
    bos = f.sp.bos_id()
    rng = random.Random(0)
    randoms = ["".join(rng.choice("the cat  sé\n東🙂0") for _ in range(rng.randint(1, 24)))
               for _ in range(150)]
    for text in TEXTS + randoms:
        expected = f.sp.encode(text)
        assert llama_cpp_spm(tokens, scores, prefix, text) == expected, repr(text)
        assert tok.encode(text) == [bos] + expected, repr(text)  # add_bos_token true
        assert tok.encode(text, add_special_tokens=False) == expected, repr(text)
        assert tok.decode(expected) == f.sp.decode(expected), repr(text)


@pytest.mark.parametrize("family", FAMILIES)
def test_completes_as_the_reference_does(files, family):
    """Raw prompts (as /v1/completions sends them) start with the BOS and give
    mlx-lm's greedy tokens on the same weights; a chat has the one BOS its
    template spells."""
    from mlx_lm import load as mlx_lm_load

    f = files[family]
    ref_model, ref_tok = mlx_lm_load(str(f.folder))
    reference = SimpleNamespace(model=ref_model, stop_token_ids=set(ref_tok.eos_token_ids))
    bos = f.sp.bos_id()
    engine = Engine(load_model(str(f.gguf), weight_format="float32"),
                    lanes=[LaneSpec("cpu", "cpu", "float32")])
    try:
        for text in PROMPTS:
            expected = ref_tok._tokenizer.encode(text)
            assert expected[0] == bos and expected[1:] == f.sp.encode(text)
            prepared = engine.prepare_prompt(text)
            assert prepared.prompt_ids == expected
            # The BOS spelled in the text too: still one (engine.prompt.encode_raw).
            assert engine.prepare_prompt(f.sp.id_to_piece(bos) + text).prompt_ids == expected
            handle = engine.submit(prepared, SamplingParams(max_tokens=12))
            handle.result(60)
            assert handle.request.output_ids == reference_greedy(reference, expected, 12), text
        chat = [{"role": "user", "content": "hello world"}]
        ids = engine.prepare(chat).prompt_ids
        assert ids[0] == bos and ids.count(bos) == 1
        if family == "gemma3_text":
            assert ids == list(ref_tok.apply_chat_template(chat, add_generation_prompt=True))
        else:  # llama.cpp's SentencePiece puts a '▁' after the BOS, as SentencePiece does
            assert ids == [bos] + f.sp.encode("[INST] hello world [/INST]")
    finally:
        engine.close()


def test_the_folder_of_the_same_model_is_unchanged(files):
    from mlx_lm import load as mlx_lm_load

    f = files["gemma3_text"]
    loaded = load_model(str(f.folder))
    _, ref_tok = mlx_lm_load(str(f.folder))
    text = "The capital of France is"
    assert loaded.tokenizer.encode(text) == ref_tok.encode(text) == [f.sp.bos_id()] + f.sp.encode(
        text)
    chat = list(loaded.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                     add_generation_prompt=True))
    assert chat.count(f.sp.bos_id()) == 1 and chat[0] == f.sp.bos_id()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_prompt_that_spells_its_bos_keeps_one(files, family):
    """"<s>[INST] ..." pasted as a raw prompt: the tokenizer adds a BOS and
    the text spells one; the prompt keeps one (llama.cpp warns of two)."""
    from engine.prompt import encode_raw

    f = files[family]
    tokenizer = build_tokenizer(read_metadata(f.gguf))
    bos = f.sp.bos_id()
    text = "The capital of France is"
    spelled = f.sp.id_to_piece(bos) + text
    assert tokenizer.encode(spelled)[:2] == [bos, bos]  # what the tokenizer alone gives
    assert encode_raw(tokenizer, spelled) == encode_raw(tokenizer, text) == [bos] + f.sp.encode(text)
    assert encode_raw(tokenizer, "hello " + f.sp.id_to_piece(bos)).count(bos) == 2  # mid-text: kept
