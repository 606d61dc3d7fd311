"""How much of an input an embedding model reads (issue 48): a
sentence-transformers folder says it in sentence_bert_config.json
(all-MiniLM-L6-v2: max_seq_length 256, though its encoder and tokenizer take
512), and sentence-transformers cuts every input there, [CLS] and [SEP]
included. Tandem cut at the encoder's positions, so a long input's vector
differed from sentence-transformers' (cosine 0.948 on a real 562-token text).
Checked against the embedding library's own BERT (tests/embedding_models.py)
on the ids sentence-transformers' tokenization gives; usage and the server's
log line count the tokens embedded."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine import Engine, LaneSpec, load_embedding_model, load_model
from tests.embedding_models import build_bert, reference_bert
from tests.test_server import Served

LONG = " ".join(["the quick brown fox jumps over the lazy dog and keeps on running"] * 6)
MAX_SEQ = 32


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory):
    """As all-MiniLM-L6-v2 is published: max_seq_length below the encoder's
    positions and the tokenizer's model_max_length."""
    return build_bert(tmp_path_factory.mktemp("st") / "st-bert", positions=130,
                      model_max_length=130, max_seq_length=MAX_SEQ)


def _reference(path, ids: list[int]) -> np.ndarray:
    model, _ = reference_bert(path)
    return np.asarray(model(mx.array([ids]), attention_mask=mx.ones((1, len(ids)))).text_embeds)


def _cosine(a, b) -> float:
    a, b = np.ravel(np.asarray(a, np.float64)), np.ravel(np.asarray(b, np.float64))
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_an_input_is_cut_at_max_seq_length_as_sentence_transformers_cuts_it(st_dir):
    ours = load_embedding_model(str(st_dir))
    assert ours.max_tokens == MAX_SEQ
    _, tokenizer = reference_bert(st_dir)
    whole = tokenizer(LONG)["input_ids"]
    # sentence-transformers' Transformer.tokenize: truncation at max_seq_length.
    cut = tokenizer(LONG, truncation=True, max_length=MAX_SEQ)["input_ids"]
    assert len(whole) > 2 * MAX_SEQ and len(cut) == MAX_SEQ
    assert cut[-1] == tokenizer.sep_token_id and ours.encode(LONG) == cut
    mine = ours.embed([ours.encode(LONG)])
    assert _cosine(mine, _reference(st_dir, cut)) >= 1 - 1e-5
    # What reading it all gave, as far as the encoder's 130 positions go (past
    # them the reference reads its position table out of bounds: NaN at times).
    assert _cosine(mine, _reference(st_dir, whole[:130])) < 0.999
    # Token ids a client sends are cut there too.
    assert ours.check_ids(whole) == whole[:MAX_SEQ]


def test_without_sentence_bert_config_the_tokenizer_and_the_positions_bound_it(tmp_path):
    plain = load_embedding_model(str(build_bert(tmp_path / "p", positions=130,
                                                model_max_length=100)))
    assert plain.max_tokens == 100
    huge = load_embedding_model(str(build_bert(tmp_path / "h", positions=130,
                                               model_max_length=10**30)))
    assert huge.max_tokens == 130  # "no limit" from the tokenizer: the encoder's positions


def test_do_lower_case_lowers_the_text_first(tmp_path):
    lowered = load_embedding_model(str(build_bert(
        tmp_path / "lower", cased=True, max_seq_length=MAX_SEQ, do_lower_case=True)))
    kept = load_embedding_model(str(build_bert(
        tmp_path / "kept", cased=True, max_seq_length=MAX_SEQ, do_lower_case=False)))
    assert lowered.encode("The QUICK Fox") == lowered.encode("the quick fox")
    assert kept.encode("The QUICK Fox") != kept.encode("the quick fox")


def test_usage_and_the_log_count_the_tokens_embedded(st_dir, tiny_model_dir):
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    embedding_model=load_embedding_model(str(st_dir)))
    assert engine.wait_ready(120)
    served = Served(engine)
    try:
        _, tokenizer = reference_bert(st_dir)
        short = len(tokenizer("hi")["input_ids"])
        done = served.client().embeddings.create(model="st-bert", input=[LONG, "hi"],
                                                 encoding_format="float")
        assert done.usage.prompt_tokens == MAX_SEQ + short
        cut = tokenizer(LONG, truncation=True, max_length=MAX_SEQ)["input_ids"]
        assert _cosine(done.data[0].embedding, _reference(st_dir, cut)) >= 1 - 1e-5
        assert served.wait_logged(1)
        assert f"200 · {MAX_SEQ + short} tokens embedded" in served.logged[-1]
    finally:
        served.stop()
        engine.close()
