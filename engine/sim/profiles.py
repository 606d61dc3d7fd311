"""Cost profiles for the simulator, read from profiles.json."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.costmodel import CostModel

_DATA = json.loads((Path(__file__).with_name("profiles.json")).read_text())
PROFILES = tuple(_DATA["profiles"])
CONTENTIONS = tuple(_DATA["contention"])


@dataclass(slots=True, frozen=True)
class SimLaneSpec:
    name: str
    device: str
    cost: CostModel


def load_profile(name: str, contention: float = 0.0,
                 cpu_speed: float = 1.0) -> tuple[list[SimLaneSpec], float]:
    """The lanes of profile `name` (with contention c) and its migration cost.
    `cpu_speed` scales the CPU lane's prefill and decode rates (a what-if:
    a faster or slower CPU lane beside the same GPU)."""
    if cpu_speed <= 0:
        raise ValueError("cpu_speed must be positive")
    profile = _DATA["profiles"][name]
    lanes = []
    for lane_name, spec in profile["lanes"].items():
        scale = cpu_speed if spec["device"] == "cpu" else 1.0
        cost = CostModel(prefill_tps=spec["prefill_tps"] * scale,
                         decode_points=[(c, tps * scale) for c, tps in spec["decode_points"]],
                         batch_alpha=spec["batch_alpha"], contention=contention)
        lanes.append(SimLaneSpec(lane_name, spec["device"], cost))
    return lanes, float(profile["migration_s"])


def load_remote(name: str, lane_name: str = "remote"):
    """A simulated remote server (engine/sim/remote.py) from profiles.json."""
    from ..core.remote_cost import RemoteCost
    from .remote import SimRemoteSpec

    spec = _DATA["remotes"][name]
    truth = RemoteCost(overhead_s=spec["overhead_s"], prefill_tps=spec["prefill_tps"],
                       decode_tps=spec["decode_tps"], batch_alpha=spec["batch_alpha"])
    return SimRemoteSpec(lane_name, truth, capacity=spec["capacity"])


def load_draft_costs(name: str) -> dict:
    """SIMULATION: each lane's DraftCost (engine/sim/drafts.py) in profile
    `name`, from profiles.json's "drafts" section (its note says which
    figures are measured and which assumed)."""
    from .drafts import DraftCost

    return {lane: DraftCost(**spec) for lane, spec in _DATA["drafts"][name].items()}
