"""Drafts (issue 32), measured side by side: the cases `benchmarks/speculative.py`
runs with --lanes, --draft-model, --verify and --replay (see its docstring).
Every case compares answers.
"""

from __future__ import annotations

import statistics
import time

import engine  # noqa: F401,I001  (first: it loads the system OpenBLAS before MLX)
import mlx.core as mx

from engine import Engine, SamplingParams
from engine_throughput import QUESTIONS  # this folder: the same prompts

ANSWER = 128  # tokens per answer in the drafts cases (speculative.py --answer-tokens)


COPY = ("Copy this paragraph exactly, word for word:\n\n"
        "The lighthouse stood on the northern cliff for two hundred years. Every night its "
        "keeper climbed the spiral stairs, trimmed the wick and wound the clockwork that "
        "turned the great lens, so that ships far out at sea could find their way home.")
OPEN = "Tell me something interesting about octopuses."
PARAGRAPHS = [
    COPY.split("\n\n", 1)[1],
    "Bread rises because yeast eats the sugars in the flour and breathes out carbon "
    "dioxide. The gas is caught in a web of gluten, which stretches like a balloon, and "
    "the heat of the oven sets the web before the bubbles can escape.",
    "The river starts as snow on the high peaks. In spring it melts, runs down through "
    "pine forests and narrow gorges, turns the wheels of three old mills and finally "
    "spreads out into a wide, slow delta full of birds.",
    "Our meeting moves to Thursday at ten in the small room on the second floor. Please "
    "bring the budget figures for the third quarter and a list of the open questions "
    "from the customer visit last week.",
]
COPIES = [f"Copy this paragraph exactly, word for word:\n\n{p}" for p in PARAGRAPHS]


def lookup_replay(eng: Engine, tokens: int, k: int = 8) -> dict:
    """How far lookup drafts could go (engine/core/drafts.py), replayed over
    real greedy answers: at each verification step the drafter proposes up
    to k tokens from the prompt and the answer so far; those matching the
    answer are accepted, then the target's own token. Steps per answer, not
    speed: the lanes do not verify drafts yet (a replay, not a measurement
    of decode time)."""
    from engine.core.drafts import LookupDrafter

    out = {}
    for name, text in (("copy", COPY), ("open chat", OPEN)):
        prepared = eng.prepare([{"role": "user", "content": text}])
        handle = eng.submit(prepared, SamplingParams(max_tokens=tokens))
        handle.result(600)
        handle_ids = list(handle.request.output_ids)
        drafter = LookupDrafter(prepared.prompt_ids)
        at, steps, proposed, accepted = 0, 0, 0, 0
        while at < len(handle_ids):
            proposal = drafter.propose(k)
            hits = 0
            while hits < len(proposal) and at + hits < len(handle_ids) and \
                    proposal[hits] == handle_ids[at + hits]:
                hits += 1
            taken = handle_ids[at:at + hits + 1]
            drafter.extend(taken)
            at += len(taken)
            steps += 1
            proposed += len(proposal)
            accepted += hits
        out[name] = {"answer_tokens": len(handle_ids), "verify_steps": steps,
                     "tokens_per_step": round(len(handle_ids) / max(steps, 1), 2),
                     "proposed": proposed, "accepted": accepted}
    return out


def verify_case(model_name: str, tokens: int, rounds: int) -> dict:
    """A lone greedy request decoded two ways on the same model and caches
    kind, alternating: one token per forward (what the lanes do), and lookup
    drafts verified in one forward (engine/runtime/verify.py) with k chosen by
    DraftPolicy from widths timed first. Measured speed of the mechanism,
    outside the lanes (they do not verify drafts yet); the answers are
    compared token for token."""
    from mlx_lm.models.cache import make_prompt_cache

    from engine.core.drafts import DraftPolicy, LookupDrafter
    from engine.models.loader import load_model
    from engine.runtime.verify import verify_greedy

    # A CPU lane's weights: dequantized to float32 (BLAS), as the engine's
    # CPU lane holds the bundled model.
    loaded = load_model(model_name, weight_format="float32")
    model, tok = loaded.model, loaded.tokenizer
    stops = loaded.stop_token_ids

    def prefilled(prompt):
        caches = make_prompt_cache(model)
        mx.eval(model(mx.array([prompt[:-1]]), cache=caches))
        return caches

    def width_cost(width, prompt):
        caches = prefilled(prompt)
        ids = mx.array([prompt[-1:] * width])
        mx.eval(model(ids, cache=caches))
        start = time.perf_counter()
        for _ in range(5):
            mx.eval(model(ids, cache=caches))
        return (time.perf_counter() - start) / 5

    def plain(prompt):
        caches, fed, out = prefilled(prompt), prompt[-1], []
        start = time.perf_counter()
        while len(out) < tokens:
            fed = int(mx.argmax(model(mx.array([[fed]]), cache=caches)[0, -1]).item())
            out.append(fed)
            if fed in stops:
                break
        return out, time.perf_counter() - start

    def drafted(prompt, cost_of):
        caches, fed, out = prefilled(prompt), prompt[-1], []
        drafter, policy = LookupDrafter(prompt), DraftPolicy()
        start = time.perf_counter()
        while len(out) < tokens and not (out and out[-1] in stops):
            proposal = drafter.propose(policy.max_k)
            proposal = proposal[:policy.next_k(len(proposal), cost_of)]
            emitted = verify_greedy(model, caches, fed, proposal)
            policy.record(len(proposal), len(emitted) - 1)
            drafter.extend(emitted)
            out.extend(emitted)
            fed = emitted[-1]
        cut = next((i + 1 for i, t in enumerate(out) if t in stops), len(out))
        return out[:min(cut, tokens)], time.perf_counter() - start, policy

    report = {}
    for name, text in (("copy", COPY), ("open chat", OPEN)):
        prompt = list(tok.apply_chat_template([{"role": "user", "content": text}],
                                              add_generation_prompt=True))
        one, nine = width_cost(1, prompt), width_cost(9, prompt)
        cost_of = (lambda k, a=one, b=(nine - one) / 8: a + b * k)
        times = {"plain": [], "drafts": []}
        for r in range(rounds + 1):  # round 0 warms both and is not counted
            base, t_plain = plain(prompt)
            answer, t_drafts, policy = drafted(prompt, cost_of)
            if r:
                times["plain"].append(len(base) / t_plain)
                times["drafts"].append(len(answer) / t_drafts)
        report[name] = {
            "width_1_ms": round(one * 1e3, 1), "width_9_ms": round(nine * 1e3, 1),
            "plain_tok_s": [round(x, 1) for x in times["plain"]],
            "drafts_tok_s": [round(x, 1) for x in times["drafts"]],
            "drafts_vs_plain": round(statistics.median(times["drafts"])
                                     / statistics.median(times["plain"]), 2),
            "identical": answer == base, "tokens": len(base),
            "drafted": policy.drafted, "accepted": policy.accepted}
    return report


def lanes_case(model_name: str, rounds: int, streams: int, only_streams: bool = False,
               answer: int = ANSWER) -> dict:
    """The engine's lanes with drafts off and LaneConfig(drafts="lookup"),
    two engines on one model, alternating: a lone request (copy, open chat;
    greedy, greedy with a repetition penalty 1.1, the model's own sampling
    with a seed): decode tok/s = output tokens after the first over the
    time after the first token; then `streams` greedy requests at once, open
    chats and copies (drafts verified in the batch, ragged caches): output
    tok/s over the wall time. Answers compared."""
    from engine import default_lanes

    engines = {d: Engine.load(model_name, lanes=default_lanes(d)) for d in ("off", "lookup")}
    report = {}
    try:
        for e in engines.values():
            e.wait_ready(120, every_lane=True)
        defaults = engines["off"].default_params(max_tokens=answer, seed=7)
        cases = [(f"{name}, {how}", text, params) for name, text in
                 (("copy", COPY), ("open chat", OPEN)) for how, params in (
                     ("greedy", SamplingParams(max_tokens=answer)),
                     ("greedy + penalty 1.1",
                      SamplingParams(max_tokens=answer, repetition_penalty=1.1)),
                     ("model defaults, seed 7", defaults))]
        for name, text, params in ([] if only_streams else cases):
            rates = {"off": [], "lookup": []}
            texts, drafted = {}, (0, 0)
            for r in range(rounds + 1):
                for d in (("off", "lookup") if r % 2 else ("lookup", "off")):
                    done = engines[d].generate([{"role": "user", "content": text}], params)
                    texts[d] = done.text
                    if d == "lookup":
                        drafted = (done.drafted, done.accepted_drafts)
                    if r:
                        rates[d].append((done.output_tokens - 1)
                                        / max(done.e2e_s - done.ttft_s, 1e-9))
            report[name] = {
                "off_tok_s": [round(x, 1) for x in rates["off"]],
                "lookup_tok_s": [round(x, 1) for x in rates["lookup"]],
                "lookup_vs_off": round(statistics.median(rates["lookup"])
                                       / statistics.median(rates["off"]), 2),
                "identical": texts["off"] == texts["lookup"],
                "drafted_accepted": drafted}
        for name, texts in (("open chat", QUESTIONS), ("copy", COPIES)):
            report[f"{streams} streams, {name}, greedy"] = streams_case(
                engines, (texts * streams)[:streams], rounds, answer)
    finally:
        for e in engines.values():
            e.close()
    return report


def streams_case(engines: dict, texts: list[str], rounds: int, answer: int = ANSWER) -> dict:
    """`len(texts)` greedy requests at once on each engine, alternating:
    output tok/s over the wall time (prefill included: the same work on
    both), and whether every answer is the same with drafts on."""
    prompts = [[{"role": "user", "content": t}] for t in texts]
    rates, answers = {"off": [], "lookup": []}, {}
    drafted = accepted = 0
    for r in range(rounds + 1):
        for d in (("off", "lookup") if r % 2 else ("lookup", "off")):
            start = time.perf_counter()
            handles = [engines[d].submit(p, SamplingParams(max_tokens=answer)) for p in prompts]
            done = [h.result(900) for h in handles]
            seconds = time.perf_counter() - start
            answers[d] = [x.text for x in done]
            if d == "lookup":
                drafted = sum(x.drafted for x in done)
                accepted = sum(x.accepted_drafts for x in done)
            if r:
                rates[d].append(sum(x.output_tokens for x in done) / seconds)
    return {"off_tok_s": [round(x, 1) for x in rates["off"]],
            "lookup_tok_s": [round(x, 1) for x in rates["lookup"]],
            "lookup_vs_off": round(statistics.median(rates["lookup"])
                                   / statistics.median(rates["off"]), 2),
            "identical": sum(a == b for a, b in zip(answers["off"], answers["lookup"])),
            "of": len(texts), "drafted_accepted": (drafted, accepted)}


def draft_model_case(model_name: str, rounds: int, k: int = 4, answer: int = ANSWER) -> dict:
    """The bundled model drafting for itself (the machinery's cost and
    ceiling: every greedy draft is accepted, and drafting costs as much as
    the target), single stream, greedy: the engine's lane with drafts off
    against LaneConfig(drafts="model"), and beside them mlx-lm on the same
    weights (the engine's loaded module): generate_step against
    speculative_generate_step(num_draft_tokens=k). Decode tok/s = tokens
    after the first over the time after the first; rounds alternate."""
    from mlx_lm.generate import generate_step, speculative_generate_step

    from engine import default_lanes

    engines = {"off": Engine.load(model_name, lanes=default_lanes("off")),
               "model": Engine.load(model_name, lanes=default_lanes("model"),
                                    draft_model=model_name)}
    report = {}
    try:
        for e in engines.values():
            e.wait_ready(120, every_lane=True)
        model, tok = engines["off"].model_info.model, engines["off"].tokenizer

        def mlx_lm(prompt, spec):
            ids = mx.array(prompt)
            steps = (speculative_generate_step(ids, model, model, num_draft_tokens=k,
                                               max_tokens=answer) if spec else
                     generate_step(ids, model, max_tokens=answer))
            out, first = [], None
            for token, *_ in steps:
                out.append(int(token))
                if first is None:
                    first = time.perf_counter()
                if out[-1] in engines["off"].model_info.stop_token_ids:
                    break
            return out, (len(out) - 1) / max(time.perf_counter() - first, 1e-9)

        for name, text in (("copy", COPY), ("open chat", OPEN)):
            messages = [{"role": "user", "content": text}]
            prompt = list(tok.apply_chat_template(messages, add_generation_prompt=True))
            rates = {w: [] for w in ("off", "model", "mlx_lm", "mlx_lm_spec")}
            texts, drafted = {}, (0, 0)
            for r in range(rounds + 1):
                for d in ("off", "model"):
                    done = engines[d].generate(messages, SamplingParams(max_tokens=answer))
                    texts[d], drafted = done.text, (done.drafted, done.accepted_drafts)
                    if r:
                        rates[d].append((done.output_tokens - 1)
                                        / max(done.e2e_s - done.ttft_s, 1e-9))
                for w, spec in (("mlx_lm", False), ("mlx_lm_spec", True)):
                    texts[w], rate = mlx_lm(prompt, spec)
                    if r:
                        rates[w].append(rate)
            med = {w: statistics.median(v) for w, v in rates.items()}
            report[name] = {
                **{f"{w}_tok_s": [round(x, 1) for x in v] for w, v in rates.items()},
                "model_vs_off": round(med["model"] / med["off"], 2),
                "mlx_lm_spec_vs_plain": round(med["mlx_lm_spec"] / med["mlx_lm"], 2),
                "model_vs_mlx_lm_spec": round(med["model"] / med["mlx_lm_spec"], 2),
                "identical": texts["off"] == texts["model"],
                "mlx_lm_identical": texts["mlx_lm"] == texts["mlx_lm_spec"],
                "drafted_accepted": drafted}
    finally:
        for e in engines.values():
            e.close()
    return report
