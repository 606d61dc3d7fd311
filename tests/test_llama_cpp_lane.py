"""A llama.cpp server beside MLX (issue 34): llama-cpp-python's server
(a stand-in that refuses token ids as it does: tests/llama_standin.py; no
model needed) routed as a remote lane. Its probe learns that it takes text,
so after that one refused call none fails; a lane added again to the same
server sends text from the start; its model id (a file path) is matched to
the loaded model with --remote URL#ID=LOCAL; a remote that is not routed
says why on the command line. Real engine on the tiny model, real HTTP."""

from __future__ import annotations

import pytest

from tests.llama_standin import MODEL_ID, LlamaStandIn


@pytest.fixture
def llama():
    server = LlamaStandIn().start()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _forget_learned_forms():
    from engine.remote import prompt_form

    prompt_form.TEXT_ONLY.clear()
    yield
    prompt_form.TEXT_ONLY.clear()


def _engine(model_dir, *remotes):
    from engine import Engine, LaneConfig, LaneSpec, load_model
    from engine.core.costmodel import CostModel

    engine = Engine(load_model(str(model_dir)), lanes=[LaneSpec(
        "cpu", "cpu", "float32", LaneConfig(min_step_s=0.05))], remotes=list(remotes))
    assert engine.wait_ready(120, every_lane=True)
    # The local lane is slow, so the router sends the remote what it can take.
    engine.lanes["cpu"].scheduler.cost = CostModel(prefill_tps=2_000,
                                                   decode_points=[(0, 20.0)])
    return engine


def test_a_server_that_refuses_token_ids_costs_one_failed_call_its_probe(tiny_model_dir,
                                                                           llama):
    from engine import SamplingParams, load_model, parse_remote

    name = load_model(str(tiny_model_dir)).name
    engine = _engine(tiny_model_dir, parse_remote(f"{llama.url}#{MODEL_ID}={name}"))
    try:
        remote = engine.remotes.lanes["remote"]
        assert remote.failed is None and not remote.prompt_as_ids
        assert (llama.calls, llama.refused) == (2, 1)  # the probe: ids refused, then text
        handles = [engine.submit([{"role": "user", "content": f"Question {i}?"}],
                                 SamplingParams(max_tokens=16)) for i in range(6)]
        done = [h.result(timeout=120) for h in handles]
        on_remote = [d for d in done if ("decode", "remote") in d.lanes]
        assert on_remote and all(d.text == "Hello from the CPU server." for d in on_remote)
        assert llama.refused == 1 and llama.calls == 2 + len(on_remote)
        assert all(isinstance(p, str) for p in llama.prompts[1:])
    finally:
        engine.close()
    again = _engine(tiny_model_dir, parse_remote(f"{llama.url}#{MODEL_ID}={name}"))
    try:  # the same server in this process: text from its first call
        assert llama.refused == 1 and not again.remotes.lanes["remote"].prompt_as_ids
    finally:
        again.close()


def test_the_command_line_says_why_a_remote_is_not_routed(tiny_model_dir, llama, capsys):
    from app import cli

    # Its id is a file path, not the loaded model's name: listed, not routed, and said.
    assert cli.main(["generate", "--model", str(tiny_model_dir), "--no-kv-cache", "--remote",
                     f"{llama.url}#{MODEL_ID}", "--max-tokens", "4", "hi"]) == 0
    err = capsys.readouterr().err
    assert "tandem: remote lane remote: not routed: it serves" in err and MODEL_ID in err
    assert llama.calls == 0
    # Without a model id it picks the one the server lists, which is not the loaded model.
    assert cli.main(["generate", "--model", str(tiny_model_dir), "--no-kv-cache", "--remote",
                     llama.url, "--max-tokens", "4", "hi"]) == 0
    assert "tandem: remote lane remote:" in capsys.readouterr().err


def test_remote_specs_name_the_local_model_they_serve():
    from engine import EngineError, parse_remote

    spec = parse_remote(f"http://127.0.0.1:8080/v1#{MODEL_ID}=default")
    assert (spec.model, spec.serves, spec.serves_model) == (MODEL_ID, "default", "default")
    assert parse_remote("http://127.0.0.1:8080/v1#qwen").serves is None
    with pytest.raises(EngineError, match="name the local model"):
        parse_remote("http://127.0.0.1:8080/v1#qwen=")
