"""Embeddings (issue 35): a BERT-style model loaded beside the chat model,
its vectors checked against the embedding library's own BERT
(mlx-embeddings 0.1.0, tests/embedding_models.py) on the same files;
requests placed on a lane where no decode runs; /v1/embeddings through the
official openai client (float and base64, dimensions); bad input a 400 that
leaks no slot; without an embedding model a 400 saying how to load one."""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np
import openai
import pytest

from engine import (Engine, EngineError, Finished, LaneConfig, LaneSpec, Routed,
                    SamplingParams, load_embedding_model, load_model)
from tests.embedding_models import build_bert, reference_bert
from tests.test_server import Served

TEXTS = ["the quick brown fox", "jumps over the lazy dog and keeps on running far away",
         "hi", "a lighthouse on the northern cliff"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return build_bert(tmp_path_factory.mktemp("bert") / "tiny-bert")


def _cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_vectors_match_the_embedding_librarys_own(bert_dir):
    ours = load_embedding_model(str(bert_dir))
    assert (ours.dims, ours.pooling, ours.normalize) == (64, "mean", True)
    model, tokenizer = reference_bert(bert_dir)
    batch = tokenizer(TEXTS, padding=True, return_tensors="np")
    theirs = model(mx.array(batch["input_ids"]),
                   attention_mask=mx.array(batch["attention_mask"])).text_embeds
    mine = ours.embed([ours.encode(t) for t in TEXTS])
    assert _cosines(mine, theirs).min() >= 1 - 1e-4
    alone = ours.embed([ours.encode(TEXTS[1])])  # padding changes nothing
    assert _cosines(alone, mine[1:2]).min() >= 1 - 1e-5


def test_cls_pooling_and_other_files_are_read_or_refused(tmp_path, tiny_model_dir):
    cls = load_embedding_model(str(build_bert(tmp_path / "cls", pooling="cls",
                                              normalize=False)))
    assert (cls.pooling, cls.normalize) == ("cls", False)
    with pytest.raises(EngineError, match="not an embedding encoder"):
        load_embedding_model(str(tiny_model_dir))  # a chat model
    with pytest.raises(EngineError, match="not found"):
        load_embedding_model(str(tmp_path / "nothing-here"))


def test_an_embedding_goes_where_no_decode_runs(bert_dir, tiny_model_dir):
    """Two lanes: while one streams an answer, the embedding runs on the other."""
    paced = LaneConfig(min_step_s=0.05)  # the answer is still streaming when it asks
    engine = Engine(load_model(str(tiny_model_dir)),
                    lanes=[LaneSpec("gpu", "cpu", "float32", paced, acts_as="gpu"),
                           LaneSpec("cpu", "cpu", "float32", paced)], mode="hybrid",
                    embedding_model=load_embedding_model(str(bert_dir)))
    try:
        assert engine.wait_ready(120, every_lane=True)
        events, heard = [], threading.Condition()

        def hear(event):
            with heard:
                events.append(event)
                heard.notify_all()

        engine.subscribe(hear)
        assert any(a.role == "embedding" for a in engine.memory_plan.aux)
        chat = engine.submit(engine.prepare([{"role": "user", "content": "Tell me a story."}]),
                             SamplingParams(max_tokens=400, temperature=0.0))
        for event in chat:  # until it decodes
            if getattr(event, "token_id", None) is not None:
                break
        streaming = chat.request.lane
        done = engine.embed(TEXTS, tab_id="api:test").result(60)
        chat.cancel()
        assert done.vectors.shape == (4, 64) and done.lane != streaming
        with heard:  # delivered on the engine's delivery thread
            assert heard.wait_for(lambda: any(
                isinstance(e, Finished) and e.lanes == (("embed", done.lane),)
                for e in events), 30)
        routed = [e for e in events if isinstance(e, Routed) and e.phase == "embed"]
        assert routed and "no decode running there" in routed[0].reason
    finally:
        engine.close()


@pytest.fixture(scope="module")
def served(bert_dir, tiny_model_dir):
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    embedding_model=load_embedding_model(str(bert_dir)))
    assert engine.wait_ready(120)
    s = Served(engine)
    yield s
    s.stop()
    engine.close()


def test_embeddings_through_the_openai_client(served, bert_dir):
    client = served.client()
    floats = client.embeddings.create(model="tiny-bert", input=TEXTS, encoding_format="float")
    base64 = client.embeddings.create(model="tiny-bert", input=TEXTS)  # the SDK asks base64
    assert [d.index for d in floats.data] == [0, 1, 2, 3]
    a = np.array([d.embedding for d in floats.data])
    b = np.array([d.embedding for d in base64.data])
    assert a.shape == (4, 64) and np.allclose(a, b, atol=1e-6)
    model, tokenizer = reference_bert(bert_dir)
    batch = tokenizer(TEXTS, padding=True, return_tensors="np")
    theirs = model(mx.array(batch["input_ids"]),
                   attention_mask=mx.array(batch["attention_mask"])).text_embeds
    assert _cosines(a, theirs).min() >= 1 - 1e-4
    assert floats.usage.prompt_tokens == sum(len(tokenizer(t)["input_ids"]) for t in TEXTS)
    cut = client.embeddings.create(model="tiny-bert", input="hi", dimensions=16,
                                   encoding_format="float")
    assert len(cut.data[0].embedding) == 16
    assert abs(np.linalg.norm(cut.data[0].embedding) - 1) < 1e-5
    ids = client.embeddings.create(model="tiny-bert", input=[[5, 6, 7]],
                                   encoding_format="float")
    assert len(ids.data[0].embedding) == 64
    assert "tiny-bert" in [m.id for m in client.models.list()]


def test_bad_embedding_requests_are_400s_that_leak_no_slot(served, make_engine):
    client = served.client()
    for bad in ([""] * 3, ["x"] * 100_000, [[1, -2]], {"text": "x"}):
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="tiny-bert", input=bad, encoding_format="float")
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="tiny-bert", input="x", dimensions=65)
    with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
        client.embeddings.create(model="tiny-bert", input=[[10**9]], encoding_format="float")
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="other", input="x")
    slots = served.server.config.app.state.slots
    with served._logged:  # a slot is given back just before the request's log line
        assert served._logged.wait_for(lambda: slots.in_flight == 0, 30)
    plain = Served(make_engine())  # no embedding model
    try:
        with pytest.raises(openai.BadRequestError, match="--embedding-model"):
            plain.client().embeddings.create(model="tiny", input="x")
    finally:
        plain.stop()


def test_the_apps_local_server_settings_load_an_embedding_model(qtbot, bert_dir,
                                                                tiny_model_dir, tmp_path):
    """Engine > Local server settings: an embedding model loads beside the
    chat model off the GUI thread, the status bar says so; a wrong path is
    said the same way, and the chat model keeps working."""
    from app.connections.server_settings import open_server_settings
    from tests.windows import open_window

    window = open_window(qtbot, tiny_model_dir, tmp_path / "emb.db")
    for source, said in ((str(tmp_path / "missing"), "Embedding model not loaded"),
                         (str(bert_dir), "Embedding model tiny-bert loaded")):
        dialog = open_server_settings(window)
        dialog.embedding.setText(source)
        with qtbot.waitSignal(window.server.embedding.done, timeout=60_000):
            dialog.accept()
        assert window.statusBar().currentMessage().startswith(said)
    assert window.engine.embedder.model.name == "tiny-bert"
    assert window.store.setting("local_server")["embedding_model"] == str(bert_dir)
    assert window.engine.embed(["hello"]).result(60).vectors.shape == (1, 64)
    window.close()


def test_an_embedding_sent_while_the_lanes_start_waits_for_one(monkeypatch, bert_dir,
                                                                 tiny_model_dir):
    """A request that comes while the lane still warms up (held there by a
    gate around the real warm-up) is placed once the lane serves, not
    refused; when the lane then fails to start, it is refused saying why."""
    import threading

    import engine.runtime.lane as lane_module

    gate, real = threading.Event(), lane_module.warm_up

    def gated(*args, **kwargs):
        assert gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(lane_module, "warm_up", gated)
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    embedding_model=load_embedding_model(str(bert_dir)))
    try:
        handle = engine.embed(["hello"])  # the lane is held in its warm-up
        assert engine.lanes["cpu"].phase != "serving" and not handle.job.future.done()
        gate.set()
        assert handle.result(60).vectors.shape == (1, 64)
    finally:
        gate.set()
        engine.close()

    def failing(*args, **kwargs):  # the lane fails its start-up once the request waits
        assert gate.wait(60)
        raise RuntimeError("no device")

    gate.clear()
    monkeypatch.setattr(lane_module, "warm_up", failing)
    engine = Engine(load_model(str(tiny_model_dir)), lanes=[LaneSpec("cpu", "cpu", "float32")],
                    embedding_model=load_embedding_model(str(bert_dir)))
    try:
        handle = engine.embed(["hello"])
        gate.set()
        with pytest.raises(EngineError, match="No lane could start: .*no device"):
            handle.result(60)
    finally:
        gate.set()
        engine.close()
