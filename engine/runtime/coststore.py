"""What lanes learned about each other, kept between runs: the contention
factor (how much longer a lane's steps take while the others run, learned
online from contended steps; engine/core/costmodel.py), and the same while
the others prefill ("<lane>:prefill"). A new engine starts
from the last run's value for the same model and lane layout instead of
probing at start-up, which would park every lane until the slowest is ready.

One small JSON file, written whole (to a temporary file, then renamed); a
missing, unreadable or damaged file is the same as none.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..core.costmodel import SETTLED_CONTENDED_STEPS, CostModel
from ..core.laneconfig import LaneSpec

MIN_CONTENDED_STEPS = SETTLED_CONTENDED_STEPS  # fewer say too little to keep
PREFILL = ":prefill"  # a lane's contention beside the others' prefills: "gpu:prefill"


class CostStore:
    def __init__(self, path: str | os.PathLike, model_name: str, lanes: list[LaneSpec]):
        self.path = Path(path)
        layout = ",".join(f"{s.name}:{s.device}:{s.weight_format}" for s in lanes)
        self.key = f"{model_name}|{layout}"

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def load(self) -> dict[str, float]:
        """Lane name -> contention, as the last run learned it (or nothing)."""
        entry = self._read().get(self.key)
        if not isinstance(entry, dict):
            return {}
        return {name: float(value) for name, value in entry.items()
                if isinstance(value, (int, float)) and 0.0 <= value <= 10.0}

    @staticmethod
    def of(stored: dict[str, float], lane: str) -> tuple[float | None, float | None]:
        """A lane's (contention beside decodes, beside prefills), None where unknown."""
        return stored.get(lane), stored.get(f"{lane}{PREFILL}")

    def save(self, costs: dict[str, CostModel | None]) -> None:
        learned = {name: round(cost.contention, 4) for name, cost in costs.items()
                   if cost is not None and cost.contended_samples >= MIN_CONTENDED_STEPS}
        learned.update({f"{name}{PREFILL}": round(cost.prefill_contention, 4)
                        for name, cost in costs.items() if cost is not None
                        and cost.prefill_contended_samples >= MIN_CONTENDED_STEPS})
        if not learned:
            return
        data = self._read()
        data[self.key] = {**(data.get(self.key) if isinstance(data.get(self.key), dict)
                             else {}), **learned}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".costs-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError:  # a read-only or full disk: the next run learns again
            try:
                os.unlink(tmp)
            except (OSError, UnboundLocalError):
                pass
