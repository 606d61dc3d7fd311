"""The engine's side of drafts (issue 32): which lanes draft and with what,
the draft model loaded and checked against the target, and its place in
the memory plan (an auxiliary model). The decisions are core/drafts.py's,
the forward passes runtime/verify.py's and runtime/draft_model.py's.

Modes, as `tandem generate --draft`, `tandem serve --draft` and the app
name them: "off"; "lookup" (n-grams of the request's own text and its
predicted output); "model" (a draft model: `--draft-model`); "auto": the
draft model when one is given, else lookup."""

from __future__ import annotations

import dataclasses

from .core.errors import EngineError
from .core.laneconfig import LaneConfig, LaneSpec
from .core.memory import AuxModel
from .models.loader import LoadedModel, load_model
from .runtime.draft_model import check_draft

CHOICES = ("auto", "off", "lookup", "model")


def lane_mode(draft: str, draft_model: str | None) -> str:
    """LaneConfig.drafts for a --draft choice; EngineError when it cannot be."""
    if draft not in CHOICES:
        raise EngineError(f"Unknown draft mode {draft!r}: one of {', '.join(CHOICES)}.",
                          "bad-argument")
    if draft == "model" and not draft_model:
        raise EngineError("--draft model needs --draft-model (a small model with the "
                          "same tokenizer).", "bad-argument")
    if draft_model and draft in ("off", "lookup"):
        raise EngineError(f"--draft-model is given but --draft is {draft}.", "bad-argument")
    if draft == "auto":
        return "model" if draft_model else "lookup"
    return draft


def load_draft(source: str, target: LoadedModel) -> LoadedModel:
    """The draft model for `target` (the engine checks it: check_lanes).
    The target's own source drafts with the target's arrays: no second copy."""
    if str(source) in (target.source, target.name):
        return dataclasses.replace(target)
    try:
        return load_model(source)
    except EngineError as e:
        raise EngineError(f"The draft model did not load: {e}", e.kind) from e


def check_lanes(specs: list[LaneSpec], draft: LoadedModel | None,
                target: LoadedModel) -> list[LaneSpec]:
    """`specs`, where a draft model is given and no lane says how to draft:
    every lane drafts with it. EngineError when a lane wants a draft model
    and there is none."""
    modes = {(s.config or LaneConfig()).drafts for s in specs}
    if "model" in modes and draft is None:
        raise EngineError("A lane drafts with a draft model but none was given.",
                          "bad-argument")
    if draft is None:
        return specs
    check_draft(target, draft)
    if modes == {"off"}:
        return [dataclasses.replace(s, config=dataclasses.replace(
            s.config or LaneConfig(), drafts="model")) for s in specs]
    return specs


def aux_models(draft: LoadedModel | None, target: LoadedModel) -> tuple[AuxModel, ...]:
    """The draft model as the memory plan counts it: its weights (none when
    it reads the target's arrays) and its KV per token."""
    if draft is None:
        return ()
    from .runtime.weights import model_shape

    shape = model_shape(draft.model, draft.context_length)
    weights = 0 if draft.model is target.model else shape.weight_bytes
    return (AuxModel("draft", draft.name or draft.label, weights, shape.kv_bytes_per_token),)


def attach(engine, draft: LoadedModel | None) -> None:
    """`engine`'s draft model from now on (None: none): checked against its
    model, given to every lane (a request takes it at its first drafting
    step; one drafting already keeps what it has), and shown in the memory
    plan. Its KV is not in the lanes' KV budgets, which were made at load:
    the budgets are limits memory grows to, and a draft's KV is ~1/10 of
    the target's for a model of the same family ~10x smaller."""
    from .core.events import MemoryPlanned

    if draft is not None:
        check_draft(engine.model_info, draft)
    engine.draft_model = draft
    for lane in engine.lanes.values():
        lane.draft_model = draft.model if draft is not None else None
    aux = aux_models(draft, engine.model_info)
    engine.memory_plan = dataclasses.replace(engine.memory_plan, aux=aux)
    engine._emit(MemoryPlanned("", None, plan=engine.memory_plan))
