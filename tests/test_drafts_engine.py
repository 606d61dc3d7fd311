"""Lookup drafts in a lane (LaneConfig(drafts="lookup")): a lone greedy
request proposes from its prompt and answer and verifies in one forward.
Real engines and real forward passes: a scripted model that copies its
prompt (so proposals are accepted), and the random tiny model (so they
mostly are not); the answer is the one drafts off gives."""

from __future__ import annotations

import pytest

from engine import Engine, LaneConfig, LaneSpec, SamplingParams
from engine.models.loader import load_model
from tests.scripted_model import build_scripted_model

SCRIPT = "Tandem batches chats on the CPU and GPU"


@pytest.fixture(scope="module")
def copier(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("copier"), SCRIPT)


def _engine(source, drafts: str) -> Engine:
    lane = LaneSpec("cpu", "cpu", weight_format="float32", config=LaneConfig(drafts=drafts))
    engine = Engine(load_model(str(source)), lanes=[lane])
    assert engine.wait_ready(120, every_lane=True)
    return engine


def _answer(engine, content, **params):
    handle = engine.submit([{"role": "user", "content": content}],
                           SamplingParams(**params))
    done = handle.result(120)
    return done, handle.request


def test_a_copy_is_written_in_fewer_steps_with_the_same_text(copier):
    plain, drafting = _engine(copier, "off"), _engine(copier, "lookup")
    try:
        base, _ = _answer(plain, f"Copy: {SCRIPT}")
        steps_before = drafting.lanes["cpu"].stats.steps
        done, request = _answer(drafting, f"Copy: {SCRIPT}")
        steps = drafting.lanes["cpu"].stats.steps - steps_before
        assert done.text == base.text == SCRIPT and done.reason == base.reason == "stop"
        assert done.output_tokens == base.output_tokens
        state = request.drafts
        assert state.policy.accepted > 0 and steps < done.output_tokens
        assert done.drafted >= done.accepted_drafts == state.policy.accepted
        # The bundled model's defaults keep a repetition penalty at temperature
        # 0: such a greedy request drafts too, with the same text; and so
        # does a sampled one.
        penalised, request = _answer(drafting, f"Copy: {SCRIPT}", repetition_penalty=1.1)
        assert penalised.text == SCRIPT and penalised.accepted_drafts > 0
        sampled, _ = _answer(drafting, f"Copy: {SCRIPT}", temperature=0.7, top_p=0.95,
                             top_k=40, min_p=0.05, repetition_penalty=1.1, seed=5)
        assert sampled.text == SCRIPT and sampled.accepted_drafts > 0
        # The KV kept matches the answer: the next turn reuses all of it.
        again, _ = _answer(drafting, f"Copy: {SCRIPT}")
        assert again.text == SCRIPT and again.cached_tokens > 0
    finally:
        plain.close()
        drafting.close()


def test_limits_hold_inside_an_accepted_run(copier):
    drafting = _engine(copier, "lookup")
    try:
        done, request = _answer(drafting, f"Copy: {SCRIPT}", max_tokens=5)
        assert done.reason == "length" and done.output_tokens == 5
        assert len(request.output_ids) == 5
        words = SCRIPT.split()
        done, _ = _answer(drafting, f"Copy: {SCRIPT}", stop=[words[4]])
        assert done.reason == "stop" and done.text == " ".join(words[:4]) + " "
    finally:
        drafting.close()


def test_a_random_model_answers_the_same_with_drafts_on(tiny_model_dir):
    plain, drafting = _engine(tiny_model_dir, "off"), _engine(tiny_model_dir, "lookup")
    try:
        for text in ("hello world", "the quick brown fox jumps over the lazy dog, the quick",
                     "one two one two one two"):
            for penalty in (1.0, 1.3):  # greedy, and greedy with a repetition penalty
                base, _ = _answer(plain, text, max_tokens=40, repetition_penalty=penalty)
                done, _ = _answer(drafting, text, max_tokens=40, repetition_penalty=penalty)
                assert done.text == base.text and done.output_tokens == base.output_tokens
        # Sampled and seeded: each position draws with its own key, so the
        # answer is the one drafts off gives, word for word.
        sampled = dict(temperature=0.8, top_p=0.95, top_k=40, min_p=0.05,
                       repetition_penalty=1.1, max_tokens=40)
        for seed in (1, 2, 3):
            base, _ = _answer(plain, "one two one two one two", seed=seed, **sampled)
            done, request = _answer(drafting, "one two one two one two", seed=seed, **sampled)
            assert done.text == base.text and request.drafts is not None
    finally:
        plain.close()
        drafting.close()


def test_the_api_reports_accepted_drafts(copier):
    """The official SDK reads usage.completion_tokens_details from `tandem
    serve --draft lookup`'s engine."""
    from tests.test_server import Served

    drafting = _engine(copier, "lookup")
    served = Served(drafting)
    try:
        client = served.client()
        done = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"Copy: {SCRIPT}"}],
            temperature=0, max_tokens=40)
        assert done.choices[0].message.content == SCRIPT
        details = done.usage.completion_tokens_details
        assert details.accepted_prediction_tokens > 0
        assert details.rejected_prediction_tokens >= 0
    finally:
        served.stop()
        drafting.close()


def test_the_api_takes_a_prediction_and_num_draft_tokens(copier):
    """OpenAI's `prediction` is a source of drafts (the prompt here does not
    hold the answer: only the prediction can propose it); mlx_lm.server's
    `num_draft_tokens` caps them (0: none); bad values are 400s."""
    import openai

    from tests.test_server import Served

    drafting = _engine(copier, "lookup")
    served = Served(drafting)
    try:
        client = served.client()
        ask = dict(model="tiny", messages=[{"role": "user", "content": "Say it."}],
                   temperature=0, max_tokens=40)
        plain = client.chat.completions.create(**ask)
        predicted = client.chat.completions.create(
            **ask, prediction={"type": "content", "content": [{"type": "text", "text": SCRIPT}]})
        assert plain.choices[0].message.content == predicted.choices[0].message.content == SCRIPT
        assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
        assert predicted.usage.completion_tokens_details.accepted_prediction_tokens > 0
        none = client.chat.completions.create(
            **ask, prediction={"type": "content", "content": SCRIPT},
            extra_body={"num_draft_tokens": 0})
        assert none.choices[0].message.content == SCRIPT
        details = none.usage.completion_tokens_details
        assert details.accepted_prediction_tokens == details.rejected_prediction_tokens == 0
        for bad in ({"num_draft_tokens": -1}, {"num_draft_tokens": "4"},
                    {"prediction": {"type": "content", "content": 5}},
                    {"prediction": "text"}):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(**ask, extra_body=bad)
    finally:
        served.stop()
        drafting.close()


def test_draft_tokens_caps_each_step(copier):
    drafting = _engine(copier, "lookup")
    try:
        done, request = _answer(drafting, f"Copy: {SCRIPT}", draft_tokens=1)
        assert done.text == SCRIPT and request.drafts.policy.max_k == 1
        assert 0 < done.accepted_drafts <= done.drafted
        done, request = _answer(drafting, f"Copy: {SCRIPT}", draft_tokens=0)
        assert done.text == SCRIPT and done.drafted == 0
        assert done.draft_note == "draft_tokens is 0"
    finally:
        drafting.close()


def test_tandem_generate_drafts_and_says_so(copier):
    """`tandem generate --draft lookup` on a model that copies: the same
    answer, and the stats line says how many drafts were accepted."""
    from tests.test_cli import _run

    args = ["-m", "app", "generate", "--model", str(copier), "--temperature", "0",
            f"Copy: {SCRIPT}"]
    rc, plain_out, plain_err = _run(args[:3] + ["--draft", "off"] + args[3:])
    assert rc == 0, plain_err
    rc, out, err = _run(args[:3] + ["--draft", "lookup"] + args[3:])
    assert rc == 0, err
    assert out == plain_out and SCRIPT in out
    assert "drafts " in err and " accepted" in err and "drafts " not in plain_err


def _together(engine, prompts, **params):
    """Submit every prompt at once (they decode in one batch); their results.
    The lanes plan under the director's lock: held while submitting, no step
    starts until all are queued (else a loaded machine's lane stepped between
    submits, and the step counts compared below depended on when)."""
    with engine.director.lock:
        handles = [engine.submit([{"role": "user", "content": p}], SamplingParams(**params))
                   for p in prompts]
    return [h.result(120) for h in handles], handles


def test_a_batch_of_copies_verifies_its_drafts_in_one_forward(copier):
    """Four requests in one decode batch draft together (ragged caches, a
    row's misses rewound alone): the same texts in fewer steps, and a
    request with logprobs has them for every token, accepted ones too."""
    from engine import Token
    from tests.test_logprobs import _check

    plain, drafting = _engine(copier, "off"), _engine(copier, "lookup")
    prompts = [f"Copy: {SCRIPT}", f"Please copy: {SCRIPT}", f"{SCRIPT}?", f"{SCRIPT}!"]
    try:
        steps = []
        for engine in (plain, drafting):
            before = engine.lanes["cpu"].stats.steps
            done, handles = _together(engine, prompts)
            steps.append(engine.lanes["cpu"].stats.steps - before)
            assert [d.text for d in done] == [SCRIPT] * 4
        assert steps[1] < steps[0]
        assert all(h.request.drafts.policy.accepted > 0 for h in handles)
        done, handles = _together(drafting, prompts, logprobs=3)
        assert [d.text for d in done] == [SCRIPT] * 4 and done[0].accepted_drafts > 0
        loaded = drafting.lanes["cpu"].model
        request = handles[0].request
        tokens = _check(type("Loaded", (), {"model": loaded})(), request.prompt_ids,
                        handles[0], 3)
        assert all(isinstance(t, Token) and t.logprob is not None for t in tokens)
    finally:
        plain.close()
        drafting.close()


def test_a_random_model_batch_answers_the_same_with_drafts_on(tiny_model_dir):
    """Greedy, penalised and seeded sampled requests decoding together: each
    answer is the one drafts off gives (ragged caches rewound row by row)."""
    plain, drafting = _engine(tiny_model_dir, "off"), _engine(tiny_model_dir, "lookup")
    texts = ["one two one two one two", "the quick brown fox jumps over the lazy dog, the quick",
             "hello world hello world", "a b a b a b a b"]
    sampled = dict(temperature=0.8, top_p=0.95, top_k=40, min_p=0.05,
                   repetition_penalty=1.1, max_tokens=40, seed=3)
    try:
        for params in (dict(max_tokens=40), dict(max_tokens=40, repetition_penalty=1.3),
                       sampled):
            base, _ = _together(plain, texts, **params)
            done, handles = _together(drafting, texts, **params)
            assert [d.text for d in done] == [b.text for b in base]
            assert all(h.request.drafts is not None for h in handles)
    finally:
        plain.close()
        drafting.close()


def test_grammars_hold_with_drafts_on(copier):
    """A constrained request drafts only what its grammar allows and draws
    each verified position under the grammar's mask; where the grammar
    turns the answer away from the prompt, the drafts it rejects leave the
    matcher (rolled back) and the caches: the text is the one drafts off
    gives, alone or beside free rows in one batch."""
    from engine import Grammar

    plain, drafting = _engine(copier, "off"), _engine(copier, "lookup")
    prompt = f"Copy: {SCRIPT}"
    grammars = [Grammar("regex", SCRIPT),  # the script itself: drafts accepted
                Grammar("regex", "Tandem batches chats on the [a-z ]+"),  # turned away
                Grammar("regex", "Tandem (batches|runs) chats on the (CPU|NPU) and GPU")]
    try:
        for grammar in grammars:
            base, _ = _answer(plain, prompt, grammar=grammar, max_tokens=24)
            done, request = _answer(drafting, prompt, grammar=grammar, max_tokens=24)
            assert done.text == base.text and done.reason == base.reason, grammar
            if grammar is grammars[0]:
                assert done.text == SCRIPT and done.accepted_drafts > 0
        texts = [prompt] * 4
        handles = [drafting.submit([{"role": "user", "content": t}],
                                   SamplingParams(max_tokens=24, grammar=g))
                   for t, g in zip(texts, [*grammars, None])]
        done = [h.result(120) for h in handles]
        base = [_answer(plain, t, max_tokens=24, grammar=g)[0]
                for t, g in zip(texts, [*grammars, None])]
        assert [d.text for d in done] == [b.text for b in base]
        assert done[0].accepted_drafts > 0 and done[3].accepted_drafts > 0
    finally:
        plain.close()
        drafting.close()
