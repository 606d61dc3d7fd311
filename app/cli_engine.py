"""The engine of `tandem generate` and `tandem serve`, from their options:
the model, drafts, remote lanes, the disk tier's folder; closed whole when
Ctrl+C (or, for serve, SIGTERM) comes while its lanes warm up."""

from __future__ import annotations

import os
import sys

from app.cli_exit import close_engine
from app.ui.terminal import terminal_text


def _remote_specs(texts: list[str]) -> list:
    """--remote URL[#MODEL[=LOCAL]] as (spec, key) pairs; EngineError if one is wrong."""
    from engine import parse_remote

    key = os.environ.get("TANDEM_REMOTE_KEY") or None
    return [(parse_remote(text, name="remote" if i == 0 else f"remote{i + 1}"), key)
            for i, text in enumerate(texts)]


def kv_cache_dir(args) -> str | None:
    """The disk tier's folder for this command (None: --no-kv-cache)."""
    if args.no_kv_cache:
        return None
    if args.kv_cache_dir:
        return args.kv_cache_dir
    from app.store.journal import cache_dir

    return str(cache_dir() / "kv")


def load_engine(model: str, remotes: list[str] = (), draft: str = "off",
                draft_model: str | None = None, kv_cache_dir: str | None = None,
                embedding_model: str | None = None):
    """The engine for `model`, or None after saying why on stderr. Ctrl+C
    while its lanes warm up closes it (their threads park) and raises
    KeyboardInterrupt."""
    from engine import Engine, EngineError, default_lanes
    from engine.drafts import lane_mode
    from engine.engine import FIRST_LANE_WAIT_S

    engine = None
    try:
        extra = {"remotes": _remote_specs(list(remotes))} if remotes else {}
        if kv_cache_dir:
            extra["kv_cache_dir"] = kv_cache_dir
        if embedding_model:
            extra["embedding_model"] = embedding_model
        mode = lane_mode(draft, draft_model)
        if mode != "off":
            extra["lanes"] = default_lanes(mode)
        if draft_model:
            extra["draft_model"] = draft_model
        engine = Engine.load(model, ready_s=None, **extra)
        engine.wait_ready(FIRST_LANE_WAIT_S)
        if remotes:  # their probes: route the first request with measured costs
            engine.wait_ready(60, every_lane=True)
            for lane in engine.lane_info():  # a remote not routed to says why
                if lane.kind == "remote" and lane.failed:
                    print(terminal_text(f"tandem: remote lane {lane.name}: {lane.failed}"),
                          file=sys.stderr)
        return engine
    except EngineError as e:
        if engine is not None:
            close_engine(engine)
        print(terminal_text(f"tandem: {e}"), file=sys.stderr)
        return None
    except BaseException:  # Ctrl+C: no lane is left warming up as the process ends
        if engine is not None:
            close_engine(engine)
        raise
