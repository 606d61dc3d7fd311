"""Embedding work in bounded slices (issue 47, defect 3): a big request runs
a slice at a time between a lane's steps, so a chat keeps decoding; its
vectors equal those of one pass over all its inputs; a cancelled request
runs none of its remaining slices; on the server a request holds its slot
(`in_flight`) until the lane has stopped running it, and a client that
leaves cancels it. Deterministic: the tests count encoder passes and steps
(a recording StepGate, on the lane's thread), never a clock."""

from __future__ import annotations

import socket
import threading

import httpx
import numpy as np
import pytest

from engine import (EngineError, Finished, LaneConfig, LaneSpec, SamplingParams,
                    load_embedding_model)
from engine.core.embed_place import SlicePace, slice_rows
from engine.runtime.embed import EmbedJob, EmbedQueue
from tests.embedding_models import build_bert
from tests.helpers import TokenCounter, prompt_of
from tests.test_server import Served
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return build_bert(tmp_path_factory.mktemp("bert") / "tiny-bert")


class Recorder:
    """A StepGate that paces nothing and writes each step (how many rows it
    decoded) in a log that the encoder's passes also write to."""

    def __init__(self):
        self.log: list[tuple[str, int]] = []

    def begin(self, lane):
        pass

    def end(self, lane, plan, measured_s):
        self.log.append(("step", len(plan.decode)))
        return measured_s

    def idle(self, lane):
        pass


def count_passes(monkeypatch, model, log: list, during=None):
    """Each encoder pass of `model` writes ("pass", rows) to `log` (on the
    lane's thread), then calls `during(passes so far)`."""
    real = model.embed

    def embed(batch):
        log.append(("pass", len(batch)))
        if during is not None:
            during(sum(1 for kind, _ in log if kind == "pass"))
        return real(batch)

    monkeypatch.setattr(model, "embed", embed)
    return real


def inputs_of(n: int, shortest: int) -> list[list[int]]:
    return [[5 + (i * 7 + j) % 200 for j in range(shortest + i)] for i in range(n)]


def test_slices_are_bounded_and_jobs_take_turns():
    """Plain decisions: a slice's inputs fit its budget padded (at least one);
    the budget follows the measured rate within its bounds; two jobs on one
    queue alternate, each slice shortest first, and each gets its vectors."""
    assert slice_rows([3, 4, 4, 9], 12) == 3 and slice_rows([30, 40], 12) == 1
    assert slice_rows([5] * 10, 10_000) == 10
    pace = SlicePace(busy=(100, 1000), idle=(500, 4000), idle_s=0.5)
    assert (pace.budget(True, 0.1), pace.budget(False, None)) == (100, 500)  # not measured yet
    pace.learn(2000, 1.0)
    assert (pace.budget(True, 0.1), pace.budget(True, 10.0), pace.budget(False, None)) == (
        200, 1000, 1000)

    class Model:  # a vector says which input it is: (its length, its first id)
        def __init__(self):
            self.passes = []

        def embed(self, batch):
            import mlx.core as mx

            self.passes.append([row[0] for row in batch])
            return mx.array([[len(row), row[0]] for row in batch], dtype=mx.float32)

    model, queue = Model(), EmbedQueue(threading.Condition())
    queue.pace = SlicePace(busy=(8, 8), idle=(8, 8))
    a = EmbedJob("a", None, [[1] * 4, [2] * 2, [3] * 3], model)
    b = EmbedJob("b", None, [[7] * 8], model)
    gone = []
    for job in (a, b):
        job.when_gone(lambda j: gone.append(j.request_id))
        assert queue.add(job)
    assert queue.tokens == 17
    while queue:
        queue.run_slice(False, None)
    assert model.passes == [[2, 3], [7], [1]] and queue.slices == 3 and gone == ["b", "a"]
    assert a.future.result().tolist() == [[4, 1], [2, 2], [3, 3]]
    assert b.future.result().tolist() == [[8, 7]] and queue.tokens == 0


def test_a_chat_decodes_between_the_slices_of_a_big_embedding(make_engine, tiny_loaded,
                                                              bert_dir, monkeypatch):
    gate = Recorder()
    engine = make_engine([LaneSpec("cpu", "cpu", "float32", LaneConfig(gate=gate))],
                         embedding_model=load_embedding_model(str(bert_dir)))
    lane, model = engine.lanes["cpu"], engine.embedder.model
    lane.embeds.pace = SlicePace(busy=(110, 110), idle=(110, 110))  # two inputs a slice
    one_go = count_passes(monkeypatch, model, gate.log)
    counter = TokenCounter(engine)
    chat = engine.submit(prompt_ids=prompt_of(tiny_loaded, "Tell me a story."),
                         params=SamplingParams(max_tokens=300))
    counter.wait_for(chat.request_id, 1)
    inputs = inputs_of(12, 40)  # 40 to 51 tokens each
    done = engine.embed(inputs).result(120)
    chat.cancel()
    log = gate.log
    passes = [i for i, (kind, _) in enumerate(log) if kind == "pass"]
    assert len(passes) == 6 and all(log[i][1] == 2 for i in passes)
    for a, b in zip(passes, passes[1:]):  # the chat decoded between every two slices
        assert any(kind == "step" and rows >= 1 for kind, rows in log[a + 1:b]), log[a:b]
    assert chat.result(30).output_tokens >= 6
    whole = np.array(one_go(inputs), dtype=np.float32)  # one pass over all of them
    assert done.vectors.shape == (12, 64) and np.allclose(done.vectors, whole, atol=1e-5)


def test_a_cancelled_embedding_runs_none_of_its_remaining_slices(make_engine, bert_dir,
                                                                  monkeypatch):
    engine = make_engine(embedding_model=load_embedding_model(str(bert_dir)))
    lane, model = engine.lanes["cpu"], engine.embedder.model
    lane.embeds.pace = SlicePace(busy=(1, 1), idle=(1, 1))  # one input a slice
    finished, heard = [], threading.Condition()

    def hear(event):
        if isinstance(event, Finished):
            with heard:
                finished.append(event)
                heard.notify_all()

    engine.subscribe(hear)
    handles, log = [], []
    count_passes(monkeypatch, model, log,
                 during=lambda n: handles[0].cancel() if n == 2 else None)
    handles.append(engine.embed(inputs_of(8, 10)))
    with heard:  # the lane let it go: Finished, after the slice that ran when it was cancelled
        assert heard.wait_for(lambda: any(e.request_id == handles[0].job.request_id
                                          for e in finished), 60)
    assert [e.reason for e in finished] == ["cancelled"]
    assert len(log) == 2  # of 8 slices
    with pytest.raises(EngineError, match="cancelled") as raised:
        handles[0].result(10)
    assert raised.value.kind == "cancelled"
    assert lane.embeds.tokens == 0 and not lane.embeds
    assert engine.embed([[5, 6, 7]]).result(60).vectors.shape == (1, 64)  # the lane goes on


@pytest.fixture
def served(make_engine, bert_dir):
    engine = make_engine(embedding_model=load_embedding_model(str(bert_dir)))
    s = Served(engine)
    yield s
    s.stop()


def test_an_embedding_holds_its_slot_while_it_runs_and_a_client_that_leaves_cancels_it(
        served, monkeypatch):
    """The first slice is held on the lane; the client hangs up meanwhile:
    the request is cancelled but still counted in `in_flight` until that
    slice ends; then none of its other slices run and its slot is free."""
    engine = served.engine
    lane, model = engine.lanes["cpu"], engine.embedder.model
    lane.embeds.pace = SlicePace(busy=(1, 1), idle=(1, 1))
    held, release, log = threading.Event(), threading.Event(), []

    def hold(n):
        if n == 1:
            held.set()
            assert release.wait(60)

    count_passes(monkeypatch, model, log, during=hold)
    jobs, add = [], lane.embeds.add
    monkeypatch.setattr(lane.embeds, "add", lambda job: jobs.append(job) or add(job))
    body = httpx.Request("POST", served.url + "/v1/embeddings", json={
        "model": "tiny-bert", "input": inputs_of(6, 10), "encoding_format": "float"})
    head = "".join(f"{k}: {v}\r\n" for k, v in body.headers.items())
    slots = served.server.config.app.state.slots
    client = socket.create_connection(("127.0.0.1", served.port))
    try:
        client.sendall(f"POST /v1/embeddings HTTP/1.1\r\n{head}\r\n".encode() + body.read())
        assert held.wait(60) and slots.in_flight == 1
    finally:
        client.close()  # the client leaves while its first slice runs
    try:
        assert wait_until(lambda: jobs and jobs[0].future.cancelled()), "not cancelled"
        assert slots.in_flight == 1  # its slice still runs: counted
    finally:
        release.set()
    assert wait_until(lambda: slots.in_flight == 0)
    assert served.wait_logged(1)
    assert len(log) == 1  # of 6 slices
