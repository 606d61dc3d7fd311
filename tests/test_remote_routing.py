"""Remote lanes' decisions as plain Python: the spec's checks, the circuit
breaker, the cost learned online, capacity, and the router's choices with a
remote beside local lanes (checked against its own predictions). The
simulator runs them on the production code (engine/sim/remote.py)."""

from __future__ import annotations

import threading

import pytest

from engine.core.costmodel import CostModel
from engine.core.errors import EngineError
from engine.core.params import SamplingParams
from engine.core.policies import CostAwarePolicy
from engine.core.remote import CircuitBreaker, RemoteSpec, parse_remote
from engine.core.remote_cost import RemoteCost
from engine.core.remote_scheduler import RemoteScheduler
from engine.core.request import Request
from engine.core.router import LaneView, RequestView, eligible_lanes


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_spec_refuses_plain_http_to_another_machine_unless_confirmed():
    with pytest.raises(EngineError) as e:
        RemoteSpec("http://192.168.1.20:8000/v1")
    assert e.value.kind == "insecure-remote" and "https" in str(e.value)
    assert RemoteSpec("http://192.168.1.20:8000", allow_http=True).url == \
        "http://192.168.1.20:8000/v1"
    assert RemoteSpec("http://localhost:8080").url == "http://localhost:8080/v1"
    assert RemoteSpec("http://[::1]:8080/v1/").url == "http://[::1]:8080/v1"
    assert RemoteSpec("https://gpu.example.com/v1").host == "gpu.example.com"
    with pytest.raises(EngineError, match="key field"):
        RemoteSpec("https://user:secret@gpu.example.com/v1")
    for bad in ("ftp://x/v1", "gpu.example.com", "https:///v1"):
        with pytest.raises(EngineError):
            RemoteSpec(bad)
    spec = parse_remote("https://gpu.example.com/v1#Qwen/Qwen2.5-7B-Instruct")
    assert spec.model == "Qwen/Qwen2.5-7B-Instruct" and spec.serves_model == spec.model
    assert spec.routes_for({"Qwen/Qwen2.5-7B-Instruct"}) and not spec.routes_for({"default"})
    assert RemoteSpec("https://h/v1", "big", serves="default").routes_for({"default"})


def test_the_breaker_backs_off_doubling_and_lets_one_request_try():
    clock = Clock()
    breaker = CircuitBreaker(clock, base_s=2.0, max_s=10.0)
    assert breaker.available() and breaker.state == "closed"
    assert breaker.failure("connection refused") == 2.0
    assert not breaker.available() and "connection refused" in breaker.describe()
    clock.t += 2.0
    assert breaker.state == "half-open" and breaker.available()
    breaker.started()
    assert not breaker.available()  # one trial at a time
    assert breaker.failure("timed out") == 4.0
    clock.t += 4.0
    assert breaker.failure("timed out") == 8.0
    assert breaker.failure("timed out") == 10.0  # capped
    breaker.success()
    assert breaker.state == "closed" and breaker.available()
    assert breaker.failure("busy", retry_after_s=7) == 7.0  # it said when to come back


def test_the_cost_model_learns_a_servers_lines():
    cost = RemoteCost()  # priors: far from this server
    for i in range(12):
        uncached = 50 + 100 * (i % 4)
        n = 1 + i % 4
        tpot = 0.01 * (1 + 0.2 * (n - 1))
        cost.observe(uncached, 0.08 + uncached / 5_000, 40, 39 * tpot, n)
    assert cost.overhead_s == pytest.approx(0.08, rel=0.05)
    assert cost.prefill_tps == pytest.approx(5_000, rel=0.05)
    assert cost.decode_tps == pytest.approx(100, rel=0.05)
    assert cost.batch_alpha == pytest.approx(0.2, rel=0.1)
    # Without spread, only the level moves.
    flat = RemoteCost()
    for _ in range(8):
        flat.observe(100, 0.5, 20, 19 * 0.05, 1)
    assert flat.prefill_tps == 2_000 and flat.ttft_s(100) == pytest.approx(0.5, rel=0.05)
    assert flat.decode_tps == pytest.approx(20, rel=0.05)
    assert RemoteCost(batch_alpha=0.0).useful_concurrency(64) == 64
    assert RemoteCost(batch_alpha=1.0).useful_concurrency(64) == 1


def _request(tab="t", prompt=100, max_tokens=64):
    return Request(list(range(1, prompt + 1)), SamplingParams(max_tokens=max_tokens), tab)


def test_capacity_is_learned_from_429s_and_from_answers_that_keep_their_speed():
    clock = Clock()
    remote = RemoteScheduler(RemoteSpec("http://127.0.0.1:1/v1", capacity=4),
                             threading.RLock(), RemoteCost(batch_alpha=0.0), clock)
    remote.warming_up = False
    for _ in range(6):
        assert remote.enqueue(_request())
    started = [remote.next_request() for _ in range(4)]
    assert all(started) and remote.next_request() is None  # at capacity
    assert remote.rate_limited(None) is None  # others still in flight: not down
    assert remote.capacity == 3 and remote.breaker.state == "closed"
    for request in started[:3]:
        remote.answered(request, request.prompt_ids, None, 0, 3.0, kept_speed=True)
        remote.done(request)
    assert remote.capacity == 4  # three answers at full capacity, at speed
    remote.done(started[3])
    # Refused with nothing else in flight: down for what it asked.
    lone = remote.next_request()
    assert remote.rate_limited(5.0) == 5.0 and not remote.is_open
    remote.done(lone)
    clock.t += 5.0
    assert remote.is_open and remote.breaker.state == "half-open"
    assert remote.next_request() is not None and remote.next_request() is None  # one trial


def test_capacity_follows_a_server_whose_streams_slow_with_company():
    """A server that answers one request at a time (llama.cpp with one slot):
    each of n streams gets 1/n of its speed. Once the fit has seen enough
    answers at several concurrencies, the capacity drops to 1."""
    remote = RemoteScheduler(RemoteSpec("http://127.0.0.1:1/v1", capacity=4),
                             threading.RLock(), RemoteCost())
    for i in range(10):
        n = 1 + i % 4
        remote.cost.observe(50, 0.1, 30, 29 * 0.02 * n, n)
        request = _request()
        remote.answered(request, request.prompt_ids, None, 0, float(n), kept_speed=False)
    assert remote.cost.batch_alpha == pytest.approx(1.0, rel=0.05)
    assert remote.capacity == 1


def test_it_remembers_what_it_holds_for_a_conversation():
    remote = RemoteScheduler(RemoteSpec("http://127.0.0.1:1/v1"), threading.RLock())
    first = _request(tab="chat", prompt=100)
    remote.answered(first, first.prompt_ids + [900, 901], None, 0, 1.0, True)
    follow = Request(first.prompt_ids + [900, 901, 7, 8, 9], SamplingParams(), "chat")
    assert remote.held_for(follow) == 102
    assert remote.held_for(_request(tab="other")) == 0
    # It reported caching half of what we believed: the belief follows.
    remote.answered(follow, follow.prompt_ids, 51, 102, 1.0, True)
    assert 0.5 < remote.prefix_hit < 1.0


def _local(name, device, tps, batch=0, queue=0, batch_alpha=1.0):
    return LaneView(name, device, queue, batch, 0, batch, 300.0, 100.0 * batch,
                    cost=CostModel(prefill_tps=1_000, decode_points=[(0, tps)],
                                   batch_alpha=batch_alpha))


def _remote(batch=0, queue=0, capacity=4, tps=50.0):
    return LaneView("remote", "remote", queue, batch, 0, 0, 0.0, 100.0 * batch,
                    cost=RemoteCost(overhead_s=0.1, prefill_tps=5_000, decode_tps=tps),
                    capacity=capacity)


def test_the_router_picks_a_remote_by_predicted_completion():
    policy = CostAwarePolicy()
    request = RequestView("r1", 500, 0, expected_output=100)
    idle_gpu = [_local("gpu", "gpu", 100.0), _local("cpu", "cpu", 20.0), _remote(tps=50.0)]
    placement = policy.place(request, idle_gpu)
    assert placement.lane == "gpu"
    assert placement.predicted_s["gpu"] < placement.predicted_s["remote"]
    busy_gpu = [_local("gpu", "gpu", 100.0, batch=8), _local("cpu", "cpu", 20.0, batch=2),
                _remote(tps=50.0)]
    placement = policy.place(request, busy_gpu)
    assert placement.lane == placement.decode_lane == "remote"
    assert placement.predicted_done_s == min(placement.predicted_s.values())
    assert "REMOTE" in placement.reason
    # A full remote queues it behind its answers in flight.
    full = _remote(batch=4, queue=4, capacity=4)
    one = _remote(batch=1)
    assert policy._remote(full, request, [full])[0] > policy._remote(one, request, [one])[0] + 1


def test_a_remote_on_this_machine_is_charged_what_it_slows_the_local_lanes():
    """A lane learns how much any other lane slows it, a remote included:
    ~0 for a server elsewhere; a server sharing this machine's cores makes
    waking it cost the busy local lane that much."""
    policy = CostAwarePolicy()
    request = RequestView("r1", 200, 0, expected_output=100)

    def lanes(contention):
        local = _local("cpu", "cpu", 40.0, batch=2, batch_alpha=0.1)  # it batches well
        local.cost.contention = contention
        return [local, _remote(tps=40.0)]

    assert policy.place(request, lanes(0.0)).lane == "remote"
    assert policy.place(request, lanes(1.0)).lane == "cpu"


def test_a_remote_holding_the_conversation_keeps_it_unless_clearly_slower():
    policy = CostAwarePolicy(sticky_margin=0.1)
    lanes = [_local("cpu", "cpu", 51.0), _remote(tps=50.0)]
    cold = policy.place(RequestView("r1", 40, 0, expected_output=100), lanes)
    held = policy.place(RequestView("r2", 40, 0, expected_output=100,
                                    remote_cached={"remote": 30}), lanes)
    assert cold.lane == "cpu" and held.lane == "remote"
    assert "REMOTE holds 30/40" in held.reason


def test_modes_keep_remotes_to_hybrid():
    lanes = [_local("gpu", "gpu", 100.0), _local("cpu", "cpu", 20.0), _remote()]
    assert [v.name for v in eligible_lanes("gpu-only", lanes)] == ["gpu"]
    assert [v.name for v in eligible_lanes("cpu-only", lanes)] == ["cpu"]
    assert "remote" in [v.name for v in eligible_lanes("hybrid", lanes)]
    cpu_and_remote = [_local("cpu", "cpu", 20.0), _remote()]
    assert [v.name for v in eligible_lanes("gpu-only", cpu_and_remote)] == ["cpu"]


def test_the_simulator_runs_the_production_remote_lane():
    """SIMULATION: the M2 lanes with and without the H100 profile; the
    remote never makes a run slower, and its cost model, learned online by
    the production code, stays near the simulated server's truth."""
    from engine.sim import Simulation, chat_workload, load_profile
    from engine.sim.profiles import load_remote

    tabs = chat_workload(12, seed=1, think_mean_s=2.0)
    specs, migration = load_profile("m2-batched", 0.2)
    alone = Simulation(specs, CostAwarePolicy(), "hybrid", migration).run(tabs)
    remote = load_remote("h100-vllm")
    specs, migration = load_profile("m2-batched", 0.2)
    sim = Simulation(specs, CostAwarePolicy(), "hybrid", migration, remotes=[remote])
    both = sim.run(tabs)
    assert len(both.requests) == len(alone.requests)
    assert both.throughput >= alone.throughput
    assert both.stat("completion")["mean"] < alone.stat("completion")["mean"]
    assert any(lanes[0][1] == "remote" for lanes in (r.lanes for r in both.requests))
    learned = sim.remotes[0].scheduler.cost
    assert learned.decode_tps == pytest.approx(remote.truth.decode_tps, rel=0.1)
    assert learned.overhead_s == pytest.approx(remote.truth.overhead_s, rel=0.3)


def test_a_requests_overall_deadline_follows_max_tokens_and_the_measured_speed():
    from engine.core.remote_limits import MAX_REQUEST_S, request_deadline_s

    spec = RemoteSpec("http://localhost:8000/v1", first_token_s=20.0, stall_s=5.0)
    cost = RemoteCost(decode_tps=50.0, batch_alpha=0.0)
    # First token, then max_tokens at a tenth of the measured speed.
    assert request_deadline_s(spec, cost, 500, 1) == pytest.approx(20.0 + 500 / 5.0)
    # Never under a first token and one stall; never over the cap; never
    # counting on less than 1 token/s however slow it was measured.
    assert request_deadline_s(spec, RemoteCost(decode_tps=1e6), 10, 1) == 25.0
    assert request_deadline_s(spec, cost, 10 ** 9, 1) == MAX_REQUEST_S
    assert request_deadline_s(spec, RemoteCost(decode_tps=0.01), 100, 1) == 120.0


def test_an_output_budget_cuts_text_at_max_tokens():
    from engine.core.remote_limits import OutputBudget

    words = lambda text: text.split()  # a tokenizer: a token a word  # noqa: E731
    budget = OutputBudget(5, words)
    assert budget.take("one two ") == ("one two ", "")
    assert budget.take("three four five six seven") == ("three four five ", "")  # longest
    assert budget.full and budget.take("eight") == ("", "")
    assert len(words(budget.text)) == 5
    plain = OutputBudget(2)  # no tokenizer: a chunk with text is a token
    assert [plain.take(t) for t in ("a", "", "b", "c")] == [("a", ""), ("", ""), ("b", ""),
                                                            ("", "")]
    assert plain.full and plain.text == "ab" and plain.chunks == 2


def test_scrub_removes_a_key_and_any_long_piece_of_it():
    from engine.core.remote_limits import scrub

    key = "sk-abcdefghijklmnop"
    assert scrub(f"bad header: Bearer {key}", key) == "bad header: Bearer ***"
    assert scrub(f"cut: {key[:11]}", key) == "cut: ***"  # a body cut mid-key
    assert scrub(f"x{key[4:12]}y and {key[:7]}", key) == f"x***y and {key[:7]}"  # 8+ only
    assert scrub("nothing here", key) == "nothing here" and scrub("t", None) == "t"
    assert scrub("pin 1234 ok", "1234") == "pin *** ok"  # a short key, where it is whole
