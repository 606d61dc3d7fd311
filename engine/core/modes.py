"""An engine's modes as plain decisions: the mode and policy it starts in,
which modes its lanes allow now, and what a routed remote lane changes.

`kinds` are the local lanes' kinds ("gpu", "cpu"); `remotes` counts the
routed remote lanes. The engine (engine/engine.py) asks; nothing here
holds state."""

from __future__ import annotations

from .policies import CostAwarePolicy
from .router import MODES, LeastLoadedPolicy, Policy


def default_mode(kinds: list[str]) -> str:
    """Hybrid with a GPU lane and a second lane, else the one device's mode."""
    has_gpu = "gpu" in kinds
    return ("hybrid" if has_gpu and len(kinds) > 1 else
            "gpu-only" if has_gpu else "cpu-only")


def default_policy(lanes: int, remotes: bool) -> Policy:
    """Cost-aware with two lanes or a remote (the router compares their
    predicted times), else least-loaded."""
    return CostAwarePolicy() if lanes > 1 or remotes else LeastLoadedPolicy()


def mode_refusal(mode: str, kinds: list[str], remotes: int) -> str | None:
    """Why lanes of these `kinds` (and `remotes` routed remote lanes) cannot
    run `mode` (None: they can)."""
    if (mode == "gpu-only" or (mode == "hybrid" and not remotes)) and "gpu" not in kinds:
        return (f"Cannot switch to {mode}: this engine has no GPU lane "
                f"(it runs CPU-only).")
    if mode == "hybrid" and len(kinds) + remotes < 2:
        return ("Cannot switch to hybrid: it needs a second lane "
                "(see the memory plan for why there is none).")
    return None


def allowed_modes(kinds: list[str], remotes: int) -> tuple[str, ...]:
    return tuple(mode for mode in MODES if mode_refusal(mode, kinds, remotes) is None)


def with_a_remote(policy: Policy, mode: str, policy_chosen: bool,
                  mode_chosen: bool) -> tuple[Policy, str]:
    """A routed remote makes the engine cost-aware (unless a policy was
    chosen) and hybrid (unless a mode was): the policy and mode it runs now."""
    if not policy_chosen and isinstance(policy, LeastLoadedPolicy):
        policy = CostAwarePolicy()
    if not mode_chosen and mode == "cpu-only":
        mode = "hybrid"
    return policy, mode
