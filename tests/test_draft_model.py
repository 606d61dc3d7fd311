"""A draft model (issue 32): a second model with the target's tokenizer
proposes tokens; the target verifies them in its batch. Real forward
passes on the tiny random model (drafting for itself, loaded twice: its own
module and caches) and on the scripted copier; real tokenizers for the
load-time check; the memory plan's auxiliary models in plain Python."""

from __future__ import annotations


import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from engine import Engine, EngineError, LaneConfig, LaneSpec, SamplingParams
from engine.core.memory import AuxModel, ModelShape, LaneRequest, plan_memory
from engine.drafts import lane_mode
from engine.models.loader import load_model
from engine.runtime.draft_model import ModelDrafter, check_draft
from tests.helpers import cheap_widths, foreign_tokenizer_copy, prompt_of, reference_greedy
from tests.scripted_model import build_scripted_model

SCRIPT = "Tandem batches chats on the CPU and GPU"


@pytest.fixture(scope="module")
def copier(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("copier"), SCRIPT)


def _greedy_after(model, tokens: list[int], k: int) -> list[int]:
    """k greedy tokens after `tokens`, on fresh caches (the reference)."""
    cache, out = make_prompt_cache(model), []
    logits = model(mx.array([tokens]), cache=cache)[:, -1, :]
    for _ in range(k):
        out.append(int(mx.argmax(logits, axis=-1).item()))
        logits = model(mx.array([[out[-1]]]), cache=cache)[:, -1, :]
    return out


def test_a_drafter_proposes_the_model_s_greedy_tokens_and_keeps_what_was_accepted(
        tiny_loaded):
    model = tiny_loaded.model
    prompt = prompt_of(tiny_loaded, "the quick brown fox jumps over the lazy dog")
    drafter = ModelDrafter(model, prompt)
    first = drafter.propose(5)
    assert first == _greedy_after(model, prompt, 5)
    # Two accepted, then the target wrote a token of its own: the draft's
    # cache keeps the accepted ones and reads only the new one.
    own = (first[2] + 1) % model.args.vocab_size
    drafter.extend(first[:2] + [own])
    kept_before = drafter.cache[0].offset
    again = drafter.propose(4)
    assert again == _greedy_after(model, prompt + first[:2] + [own], 4)
    assert kept_before == len(prompt) + 4  # the prompt and the proposal but its last
    assert drafter.cache[0].offset == len(prompt) + 3 + 3
    # A long catch-up (more than one prefill chunk) reads in chunks: the same tokens.
    long = prompt * 60
    assert ModelDrafter(model, long).propose(3) == _greedy_after(model, long, 3)
    assert drafter.propose(0) == [] and ModelDrafter(model, []).propose(3) == []


def _engine(loaded, drafts: str, draft=None) -> Engine:
    lane = LaneSpec("cpu", "cpu", weight_format="float32", config=LaneConfig(drafts=drafts))
    engine = Engine(loaded, lanes=[lane], draft=draft)
    assert engine.wait_ready(120, every_lane=True)
    if drafts != "off":
        cheap_widths(engine)
    return engine


def test_the_tiny_model_drafting_for_itself_answers_as_without(tiny_model_dir):
    target, draft = load_model(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    engine = _engine(target, "model", draft)
    texts = ["the quick brown fox", "hello world hello", "numbers 0123456789"]
    try:
        assert "Draft model" in " ".join(engine.memory_plan.describe())
        # Alone, then together in one batch (ragged caches, one draft cache each).
        done = engine.generate([{"role": "user", "content": texts[0]}],
                               SamplingParams(max_tokens=30))
        ids = prompt_of(target, texts[0])
        handles = [engine.submit(prompt_ids=prompt_of(target, t),
                                 params=SamplingParams(max_tokens=30)) for t in texts]
        for handle, text in zip(handles, texts):
            handle.result(120)
            assert handle.request.output_ids == reference_greedy(
                target, prompt_of(target, text), 30)
        # Greedy drafts of the same weights are the target's own choices.
        assert done.accepted_drafts > 0 and done.drafted >= done.accepted_drafts
        solo = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=30))
        solo.result(120)
        assert solo.request.output_ids == reference_greedy(target, ids, 30)
        # Sampled with a seed: the answer drafts off gives.
        sampled = SamplingParams(max_tokens=30, temperature=0.9, top_p=0.95, seed=11)
        with_drafts = engine.submit(prompt_ids=ids, params=sampled)
        with_drafts.result(120)
    finally:
        engine.close()
    plain = _engine(target, "off")
    try:
        without = plain.submit(prompt_ids=ids, params=sampled)
        without.result(120)
        assert with_drafts.request.output_ids == without.request.output_ids
    finally:
        plain.close()


def test_the_copier_drafting_for_itself_writes_several_tokens_a_step(copier):
    target = load_model(str(copier))
    engine = _engine(target, "model", load_model(str(copier)))
    try:
        before = engine.lanes["cpu"].stats.steps
        done = engine.generate([{"role": "user", "content": f"Copy: {SCRIPT}"}],
                               SamplingParams(max_tokens=40))
        assert done.text == SCRIPT and done.reason == "stop"
        assert engine.lanes["cpu"].stats.steps - before < done.output_tokens
        assert done.accepted_drafts > 0
    finally:
        engine.close()


def test_a_draft_model_with_another_tokenizer_is_refused_naming_both(
        tiny_model_dir, tmp_path):
    target = load_model(str(tiny_model_dir))
    foreign = load_model(str(foreign_tokenizer_copy(tiny_model_dir,
                                                    tmp_path / "foreign-draft")))
    with pytest.raises(EngineError) as err:
        check_draft(target, foreign)
    assert "foreign-draft" in str(err.value) and tiny_model_dir.name in str(err.value)
    assert "tokenizer" in str(err.value)
    with pytest.raises(EngineError):
        Engine(target, lanes=[LaneSpec("cpu", "cpu")], draft=foreign)
    # A lane that wants a draft model and none is given: a clear error too.
    with pytest.raises(EngineError, match="draft model"):
        Engine(target, lanes=[LaneSpec("cpu", "cpu", config=LaneConfig(drafts="model"))])


def test_draft_modes_of_the_command_line():
    assert lane_mode("auto", None) == "lookup" and lane_mode("auto", "m") == "model"
    assert lane_mode("off", None) == "off" and lane_mode("lookup", None) == "lookup"
    assert lane_mode("model", "m") == "model"
    for draft, model in (("model", None), ("off", "m"), ("lookup", "m"), ("wide", None)):
        with pytest.raises(EngineError):
            lane_mode(draft, model)


def test_the_memory_plan_counts_a_draft_model_once():
    shape = ModelShape(num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype_bytes=2,
                       weight_bytes=4_500 << 20, dense_params=8_000_000_000,
                       context_length=8192)
    lanes = [LaneRequest("gpu", "gpu"), LaneRequest("cpu", "cpu")]
    budget = 16 << 30
    alone = plan_memory(shape, lanes, budget)
    draft = AuxModel("draft", "Llama-3.2-1B-4bit", 700 << 20, 32 * 1024)
    planned = plan_memory(shape, lanes, budget, aux=(draft,))
    assert planned.aux == (draft,) and planned.budget_bytes == budget
    assert planned.kv_bytes_per_token == alone.kv_bytes_per_token + 32 * 1024
    kv_before = sum(lane.kv_budget_bytes for lane in alone.lanes)
    kv_after = sum(lane.kv_budget_bytes for lane in planned.lanes)
    assert kv_before - kv_after >= (700 << 20) * 0.8  # its weights come off the KV
    assert planned.planned_bytes <= budget
    lines = planned.describe()
    assert any(line.startswith("Draft model Llama-3.2-1B-4bit: weights 700.0 MiB")
               for line in lines)
    shared = plan_memory(shape, lanes, budget, aux=(AuxModel("draft", "self", 0, 0),))
    assert shared.lanes == alone.lanes
    assert "the target's weights" in " ".join(shared.describe())


def test_tandem_generate_refuses_a_draft_mode_it_cannot_keep(capsys):
    from app import cli

    assert cli.main(["generate", "--draft", "model", "hi"]) != 0
    assert "--draft model needs --draft-model" in capsys.readouterr().err


def test_tandem_generate_drafts_with_a_model_and_says_so(copier):
    """`tandem generate --draft-model` (auto: the draft model) on the copier
    drafting for itself: the same answer as drafts off."""
    from tests.test_cli import _run

    args = ["-m", "app", "generate", "--model", str(copier), "--temperature", "0",
            f"Copy: {SCRIPT}"]
    rc, plain_out, _ = _run(args[:3] + ["--draft", "off"] + args[3:])
    assert rc == 0
    rc, out, err = _run(args[:3] + ["--draft-model", str(copier)] + args[3:])
    assert rc == 0, err
    assert out == plain_out and SCRIPT in out


def test_a_draft_model_set_later_serves_the_requests_that_ask(tiny_model_dir, tmp_path):
    from engine.core.drafts import LookupDrafter

    target = load_model(str(tiny_model_dir))
    engine = _engine(target, "lookup")
    try:
        assert engine.capabilities.drafts and engine.draft_model is None
        with pytest.raises(EngineError, match="tokenizer"):
            engine.set_draft_model(load_model(str(foreign_tokenizer_copy(
                tiny_model_dir, tmp_path / "foreign"))))
        engine.set_draft_model(load_model(str(tiny_model_dir)))
        assert "Draft model" in " ".join(engine.memory_plan.describe())
        ids = prompt_of(target, "the quick brown fox")
        asked = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=20,
                                                                    drafter="model"))
        lookup = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=20))
        for handle in (asked, lookup):
            handle.result(60)
            assert handle.request.output_ids == reference_greedy(target, ids, 20)
        assert isinstance(asked.request.drafts.drafter, ModelDrafter)
        assert isinstance(lookup.request.drafts.drafter, LookupDrafter)
        assert asked.request.drafts.policy.accepted > 0  # the same weights: all accepted
        engine.set_draft_model(None)
        late = engine.submit(prompt_ids=ids, params=SamplingParams(max_tokens=5,
                                                                   drafter="model"))
        late.result(60)
        assert isinstance(late.request.drafts.drafter, LookupDrafter)
        assert engine.memory_plan.aux == ()
        with pytest.raises(EngineError):
            SamplingParams(drafter="oracle")
    finally:
        engine.close()


def test_a_draft_model_that_is_not_there_is_named_as_the_draft(capsys, tmp_path):
    from app import cli

    assert cli.main(["generate", "--draft-model", str(tmp_path / "nope"), "hi"]) == 2
    err = capsys.readouterr().err
    assert "The draft model did not load" in err and "nope" in err
