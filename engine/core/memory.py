"""The memory plan: how a machine's memory is split between weights, KV caches
and the prefix cache, lane by lane. Plain Python (no MLX): engine/runtime/weights.py
measures a loaded model (its `ModelShape`: model_shape.py), engine/runtime/placement.py
applies the plan.

Rules of `plan_memory`:
- The first lane is the primary: it holds the weights as loaded
  (`shape.weight_bytes`, the plan's `shared_weight_bytes`). It converts them in
  place to its `own_format` (a CPU-only machine: quantized -> float32) only if
  the model is quantized, the probe measured that format faster, no other lane
  needs the loaded arrays, and the converted weights fit while every lane keeps
  `min_kv_tokens` of KV. Otherwise it keeps the loaded format and says why.
- Another lane reads the primary's arrays ("shared", no extra bytes) when it can
  (unified memory, or the primary's device). It holds its own copy in
  `own_format` only if the probe measured that faster and the copy fits while
  every lane keeps `min_kv_tokens` of KV. Without unified memory a lane on
  another device must hold a copy: its own format when faster and it fits,
  else the loaded format when that fits, else the lane is off.
- What is left after `reserve_bytes`, the shared weights and the copies:
  `prefix_fraction` of it is the prefix cache; the rest is KV, split across the
  enabled lanes in shares (primary 2, every other lane 1). A lane that would get
  less than `min_kv_tokens` of KV is off (the last such lane first), and its
  share goes back to the others.
- The primary is never off: the model is loaded already. When it cannot get
  `min_kv_tokens` of KV it takes everything left (no prefix cache) and its reason
  says memory is very tight; when the weights exceed the budget, it says so.
- Auxiliary models (a draft model now; an embedding model or a vision
  tower later) come off the budget first: their weights once (none when
  one shares the target's arrays), and a request that uses one holds its KV
  too, so their KV per token adds to the plan's `kv_bytes_per_token`, which
  the lanes count KV by.
- Every reason is a sentence for people, with sizes from `format_bytes`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .model_shape import FORMAT_BYTES, ModelShape, shape_from_config  # noqa: F401 (named here too)


def format_bytes(n: int) -> str:
    """`n` bytes for people: '512 B', '1.5 KiB', '300.0 MiB', '4.2 GiB'."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(slots=True, frozen=True)
class AuxModel:
    """A model loaded beside the target: `role` ("draft", later "embedding"
    or "vision"), its weight bytes (0: it reads the target's arrays) and the
    KV bytes per token a request using it holds."""
    role: str
    name: str
    weight_bytes: int
    kv_bytes_per_token: int = 0

    def describe(self) -> str:
        weights = (f"weights {format_bytes(self.weight_bytes)}" if self.weight_bytes
                   else "the target's weights, no extra bytes")
        kv = (f", KV {format_bytes(self.kv_bytes_per_token)} per token of each request "
              f"it drafts for" if self.kv_bytes_per_token else "")
        return f"{self.role.capitalize()} model {self.name}: {weights}{kv}"


@dataclass(slots=True, frozen=True)
class LaneRequest:
    """A lane asking for memory; `own_format_faster` is the probe (None: not measured)."""
    name: str
    device: str  # "gpu" or "cpu"
    own_format: str | None = None
    own_format_faster: bool | None = None
    max_sequences: int | None = None  # its batch slots: KV beyond slots x context is never used


def lane_request(name: str, device: str, quantized: bool, cpu_matmul: str | None,
                 max_sequences: int | None = None) -> LaneRequest:
    """A lane's ask for the weights as loaded; a CPU lane of a quantized model
    asks for a float32 copy only where the load-time probe chose one
    (engine/runtime/cpu_matmul.py: only without Tandem's kernels), and gets
    it only where it fits. The engine's placement and the model library's
    verdicts ask the same way."""
    if device == "cpu" and quantized and cpu_matmul == "float32":
        return LaneRequest(name, device, "float32", True, max_sequences)
    return LaneRequest(name, device, max_sequences=max_sequences)


@dataclass(slots=True, frozen=True)
class LanePlan:
    """One lane's part of the plan: on or off, weight format, KV budget, and why."""
    name: str
    device: str
    enabled: bool
    weight_format: str  # "shared" (the primary's arrays), "quantized", "float32", ...
    weight_bytes: int  # extra bytes of this lane's own weights (0 when it shares)
    kv_budget_bytes: int
    reason: str


@dataclass(slots=True, frozen=True)
class MemoryPlan:
    """The whole plan: budget, shared weights, prefix cache and every lane."""
    budget_bytes: int
    kv_bytes_per_token: int
    shared_weight_bytes: int
    prefix_cache_bytes: int
    lanes: tuple[LanePlan, ...]
    # What a CPU lane's quantized layers run, as the load-time probe chose
    # on this machine (engine/runtime/cpu_matmul.py): "tandem" (Tandem's
    # kernels), "mlx" (MLX's op) or "float32" (a copy; None: not probed), and
    # why, in words. The model library judges other models with it.
    cpu_matmul: str | None = None
    cpu_matmul_why: str = ""
    context_length: int = 0  # the model's: a "full chat" in describe()
    aux: tuple[AuxModel, ...] = ()  # models beside the target (a draft model)

    @property
    def planned_bytes(self) -> int:
        """Shared weights, lanes' own copies, auxiliary models, KV budgets
        and the prefix cache."""
        return (self.shared_weight_bytes + self.prefix_cache_bytes
                + sum(a.weight_bytes for a in self.aux)
                + sum(lane.weight_bytes + lane.kv_budget_bytes for lane in self.lanes))

    def lane(self, name: str) -> LanePlan:
        """The plan of the lane called `name` (KeyError if none)."""
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise KeyError(name)

    @property
    def full_chat_bytes(self) -> int:
        """KV of one chat at the model's whole context (0: context unknown)."""
        return self.context_length * self.kv_bytes_per_token

    def chats(self, kv_bytes: int) -> str:
        """'~35 full chats' (or '~432,947 tokens' when the context is unknown)."""
        if self.full_chat_bytes:
            return f"~{kv_bytes // self.full_chat_bytes:,} full chats"
        return f"~{kv_bytes // max(self.kv_bytes_per_token, 1):,} tokens"

    def matmul(self, lane_name: str) -> str:
        """What the lane's matmuls run, in words ("" for a GPU lane, or where
        nothing was probed: weights that are not quantized)."""
        lane = self.lane(lane_name)
        if lane.device != "cpu" or self.cpu_matmul is None or not lane.enabled:
            return ""
        if lane.weight_format == "float32" or (lane.weight_format == "shared"
                                               and self.lanes[0].weight_format == "float32"):
            return "a float32 copy"
        return "Tandem's kernels" if self.cpu_matmul == "tandem" else "MLX's op"

    def describe(self) -> list[str]:
        """Short lines for people: the weights, what a chat costs, each lane's
        room, and that KV is a limit memory grows to, never reserved."""
        if not self.lanes:  # a model that runs on a remote server
            return ["Nothing is loaded here: the model runs on a remote server."]
        readers = [lane.name.upper() for i, lane in enumerate(self.lanes)
                   if i == 0 or (lane.enabled and lane.weight_format == "shared")]
        primary = self.lanes[0].weight_format
        lines = [f"Weights {format_bytes(self.shared_weight_bytes)}"
                 + (f" ({primary})" if primary not in ("shared", "off") else "")
                 + f", shared by {' and '.join(readers)}" if len(readers) > 1 else
                 f"Weights {format_bytes(self.shared_weight_bytes)}"
                 + (f" ({primary})" if primary not in ("shared", "off") else "")]
        per_chat = (f": a full {self.context_length:,}-token chat takes "
                    f"{format_bytes(self.full_chat_bytes)}" if self.full_chat_bytes else "")
        lines.append(f"KV {format_bytes(self.kv_bytes_per_token)} per token{per_chat}")
        lines.extend(aux.describe() for aux in self.aux)
        for lane in self.lanes:
            if not lane.enabled:
                lines.append(f"{lane.name.upper()}: {lane.reason}")
                continue
            own = f" (own copy {format_bytes(lane.weight_bytes)})" if lane.weight_bytes else ""
            matmul = self.matmul(lane.name)
            lines.append(f"{lane.name.upper()}: {lane.weight_format} weights{own}"
                         + (f", {matmul}" if matmul else "") + "; KV up to "
                         f"{format_bytes(lane.kv_budget_bytes)} "
                         f"({self.chats(lane.kv_budget_bytes)})")
        lines.append(f"Prefix cache up to {format_bytes(self.prefix_cache_bytes)}")
        lines.append(f"Memory is taken as chats grow, never reserved: at most "
                     f"{format_bytes(self.planned_bytes)} of the "
                     f"{format_bytes(self.budget_bytes)} free at load")
        return lines


def _why_not(fmt: str, faster: bool | None, cost: int, room: int) -> str:
    if faster is None:
        return f"{fmt} was not measured on this device"
    if not faster:
        return f"the probe found {fmt} no faster here"
    return (f"a {fmt} copy ({format_bytes(cost)}) does not fit in the "
            f"{format_bytes(max(room, 0))} left")


@dataclass(slots=True, frozen=True)
class _Budget:
    """What a plan is made within: the model, the memory and the rules' constants."""
    shape: ModelShape
    budget_bytes: int
    unified_memory: bool
    prefix_fraction: float
    reserve_bytes: int
    min_kv_tokens: int

    @property
    def min_kv(self) -> int:
        """The KV bytes a lane needs to be on."""
        return self.min_kv_tokens * self.shape.kv_bytes_per_token

    def free(self, weights: int) -> int:
        """Bytes left after the reserve and `weights` (negative when they do not fit)."""
        return self.budget_bytes - self.reserve_bytes - weights

    def room(self, weights: int, n_lanes: int) -> int:
        """Bytes left for more weights once every lane keeps `min_kv` (shares 2, 1, ...)."""
        smallest_share = 2 if n_lanes == 1 else 1
        keep = math.ceil(self.min_kv * (n_lanes + 1)
                         / (smallest_share * (1 - self.prefix_fraction)))
        return self.free(weights) - keep


def _primary_weights(b: _Budget, lanes: list[LaneRequest]) -> tuple[int, str, str]:
    """The primary's weights: as loaded, or converted in place to its own
    format; returns their bytes, their format and why."""
    primary, others, shape = lanes[0], lanes[1:], b.shape
    loaded, fmt = shape.weight_format, primary.own_format
    why = f"Holds the weights as loaded ({loaded}, {format_bytes(shape.weight_bytes)})."
    if not fmt or fmt == loaded:
        return shape.weight_bytes, loaded, why
    cost, left = shape.dense_bytes(FORMAT_BYTES[fmt]), b.room(0, len(lanes))
    readers = [r.name.upper() for r in others
               if not (r.own_format == fmt and r.own_format_faster)]
    if primary.own_format_faster and shape.is_quantized and not readers and cost <= left:
        return cost, fmt, (f"Converted its weights to {fmt} in place ({format_bytes(cost)}): "
                           f"the probe measured {fmt} faster here.")
    why_not = (_why_not(fmt, primary.own_format_faster, cost, left)
               if not primary.own_format_faster or cost > left
               else "only quantized weights are converted" if not shape.is_quantized
               else f"the {' and '.join(readers)} lane reads them too")
    return shape.weight_bytes, loaded, why[:-1] + f": {why_not}."


def _lane_weights(b: _Budget, r: LaneRequest, primary: LaneRequest, primary_format: str,
                  weights: int, n_active: int) -> tuple[str | None, int, str]:
    """Another lane's weights, with `weights` bytes held already and
    `n_active` lanes on: the primary's arrays ("shared"), its own copy, or
    None (off: the copy it must hold does not fit); returns the format, the
    copy's bytes and why."""
    shape = b.shape
    own = r.own_format if r.own_format not in (None, primary_format) else None
    needs_copy = not b.unified_memory and r.device != primary.device
    left = b.room(weights, n_active)
    cost = shape.dense_bytes(FORMAT_BYTES[own]) if own else 0
    if own and r.own_format_faster and cost <= left:
        return own, cost, (f"Holds its own {own} copy ({format_bytes(cost)}): the probe "
                           f"measured it faster here than the shared weights.")
    if needs_copy and shape.weight_bytes <= left:
        return shape.weight_format, shape.weight_bytes, (
            f"Holds its own copy of the weights as loaded "
            f"({format_bytes(shape.weight_bytes)}): it cannot read the "
            f"{primary.name.upper()} lane's memory"
            + (f", and {_why_not(own, r.own_format_faster, cost, left)}." if own else "."))
    if needs_copy:
        free = b.free(weights)
        return None, 0, (f"Off: its own copy of the weights "
                         f"({format_bytes(shape.weight_bytes)}) does not fit in the "
                         f"{format_bytes(max(free, 0))} left, with "
                         f"{format_bytes(max(free - left, 0))} kept for KV and the "
                         f"prefix cache.")
    return "shared", 0, (f"Reads the {primary.name.upper()} lane's {primary_format} weights"
                         + (f": {_why_not(own, r.own_format_faster, cost, left)}."
                            if own else "."))


@dataclass(slots=True)
class _Lanes:
    """The plan's lanes as it is made: those still on, their weight formats,
    the bytes of their own copies, and why."""
    active: list[LaneRequest]
    formats: dict[str, str]
    extras: dict[str, int]
    reasons: dict[str, str]

    def off(self, r: LaneRequest, reason: str) -> None:
        """Turn lane `r` off, for `reason`: its copy no longer counts."""
        self.active.remove(r)
        self.extras.pop(r.name, None)
        self.reasons[r.name] = reason


def _other_lanes(b: _Budget, lanes: list[LaneRequest], shared: int,
                 primary_format: str) -> _Lanes:
    """Every other lane, in order: it shares the primary's arrays, holds its
    own copy, or is off."""
    primary = lanes[0]
    plan = _Lanes(list(lanes), {primary.name: primary_format}, {}, {})
    for r in lanes[1:]:
        fmt, extra, reason = _lane_weights(b, r, primary, primary_format,
                                           shared + sum(plan.extras.values()),
                                           len(plan.active))
        if fmt is None:
            plan.off(r, reason)
            continue
        plan.formats[r.name], plan.reasons[r.name] = fmt, reason
        if extra:  # its own copy
            plan.extras[r.name] = extra
    return plan


def _kv_budgets(b: _Budget, plan: _Lanes, shared: int) -> tuple[int, int, dict[str, int]]:
    """Shares of what is left after the weights (primary 2, every other lane
    1); a lane that would get less than `min_kv` is off, the last such lane
    first, and the others share again. Returns the bytes free, the prefix
    cache and each lane's KV."""
    primary, kv_per_token = plan.active[0], b.shape.kv_bytes_per_token
    while True:
        free = max(b.free(shared + sum(plan.extras.values())), 0)
        prefix = int(free * b.prefix_fraction)
        shares = {r.name: (2 if r is primary else 1) for r in plan.active}
        kv = {name: (free - prefix) * s // sum(shares.values()) for name, s in shares.items()}
        short = [r for r in plan.active[1:] if kv[r.name] < b.min_kv]
        if not short:
            return free, prefix, kv
        r = short[-1]
        plan.off(r, f"Off: it would get {format_bytes(kv[r.name])} of KV cache "
                    f"({kv[r.name] // max(kv_per_token, 1):,} tokens), less than the "
                    f"{format_bytes(b.min_kv)} ({b.min_kv_tokens:,} tokens) a lane needs.")


def _primary_when_short(b: _Budget, shared: int, free: int, kv: int) -> tuple[str, int | None]:
    """The primary is never off: what its reason adds when the weights exceed
    the budget, or when its KV is below `min_kv` (then it takes all that is
    free, returned as its new KV; else None)."""
    if shared > b.budget_bytes:
        return (f" The weights exceed the budget ({format_bytes(b.budget_bytes)}); "
                f"the model is loaded already, so this lane runs with what is left.", None)
    if kv < b.min_kv:
        return (f" Memory is very tight: only {format_bytes(free)} of KV cache "
                f"({free // max(b.shape.kv_bytes_per_token, 1):,} tokens) fits, less than "
                f"the {format_bytes(b.min_kv)} a lane should have; the engine runs this "
                f"lane alone.", free)
    return "", None


def plan_memory(shape: ModelShape, lanes: list[LaneRequest], budget_bytes: int,
                unified_memory: bool = True, prefix_fraction: float = 0.15,
                reserve_bytes: int = 512 << 20, min_kv_tokens: int = 2048,
                aux: tuple[AuxModel, ...] = ()) -> MemoryPlan:
    """Split `budget_bytes` between weights, KV and the prefix cache (rules above)."""
    if aux:  # their weights off the budget; their KV with every token's
        plan = plan_memory(dataclasses.replace(shape, aux_kv_bytes=sum(
            a.kv_bytes_per_token for a in aux)), lanes,
            budget_bytes - sum(a.weight_bytes for a in aux), unified_memory,
            prefix_fraction, reserve_bytes, min_kv_tokens)
        return dataclasses.replace(plan, budget_bytes=budget_bytes, aux=tuple(aux))
    if not lanes:
        raise ValueError("plan_memory needs at least one lane")
    if len({r.name for r in lanes}) != len(lanes):
        raise ValueError("lane names must be unique")
    if not 0 <= prefix_fraction < 1:
        raise ValueError("prefix_fraction must be in [0, 1)")
    b = _Budget(shape, budget_bytes, unified_memory, prefix_fraction, reserve_bytes,
                min_kv_tokens)
    primary = lanes[0]
    shared, primary_format, primary_why = _primary_weights(b, lanes)
    plan = _other_lanes(b, lanes, shared, primary_format)
    free, prefix, kv = _kv_budgets(b, plan, shared)
    note, all_free = _primary_when_short(b, shared, free, kv[primary.name])
    if all_free is not None:  # no prefix cache: every byte for the lane that must run
        prefix, kv[primary.name] = 0, all_free
    plan.reasons[primary.name] = primary_why + note
    # A lane cannot use more KV than its slots hold at the model's context,
    # nor the prefix cache more than every lane's KV together.
    for r in plan.active:
        if r.max_sequences:
            kv[r.name] = min(kv[r.name],
                             r.max_sequences * shape.context_length * shape.kv_bytes_per_token)
    prefix = min(prefix, sum(kv[r.name] for r in plan.active))
    enabled = {r.name for r in plan.active}
    plans = tuple(LanePlan(r.name, r.device, r.name in enabled,
                           plan.formats.get(r.name, "off") if r.name in enabled else "off",
                           plan.extras.get(r.name, 0),
                           kv.get(r.name, 0) if r.name in enabled else 0,
                           plan.reasons[r.name]) for r in lanes)
    return MemoryPlan(budget_bytes, shape.kv_bytes_per_token, shared, prefix, plans,
                      context_length=shape.context_length)
