"""Where each lane's weights come from: the memory plan applied to a model.

Measures what the plan needs (engine/runtime/weights.py), asks the pure planner
(engine/core/memory.py) and builds the model objects: one shared set of arrays
for every lane that can read it, a converted or fresh copy only where the plan
gives a lane its own. `place` adds what the engine's lanes share (the
prefix cache, the model's cache kinds); `default_lanes` are the lanes an
engine gets unless told.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import NamedTuple

import mlx.core as mx

from ..core.laneconfig import LaneConfig, LaneSpec
from ..core.memory import LaneRequest, MemoryPlan, lane_request, plan_memory
from ..models.loader import LoadedModel, load_model, with_weight_format
from . import attention, qmm, swiglu
from .cpu_matmul import CpuMatmul, choose
from .cachekinds import CacheProfile, cache_profile
from .prefix import PrefixCache
from .weights import machine_budget, model_shape


def gpu_available() -> bool:
    """Whether MLX has a usable GPU here (Metal on macOS, CUDA on Linux);
    where Metal is reported but cannot run kernels, the CPU becomes MLX's
    default device (engine/models/diagnostics.py)."""
    from ..models.diagnostics import gpu_usable

    return gpu_usable()[0]


def default_lanes(drafts: str = "off") -> list[LaneSpec]:
    """A GPU lane (when MLX has one) and a CPU lane; `drafts` for each
    (LaneConfig.drafts: "off", "lookup" or "model")."""
    config = LaneConfig(drafts=drafts) if drafts != "off" else None
    if gpu_available():
        return [LaneSpec("gpu", "gpu", config=config), LaneSpec("cpu", "cpu", config=config)]
    return [LaneSpec("cpu", "cpu", config=config)]


class Placed(NamedTuple):
    """An engine's model placed: the memory plan, the prefix cache its lanes
    share, the model's cache kinds, each enabled lane's model object (`plan_lanes`)."""

    plan: MemoryPlan
    prefix_cache: PrefixCache
    cache_profile: CacheProfile
    models: dict[str, object]


def place(loaded: LoadedModel, specs: list[LaneSpec], budget_bytes: int | None, aux: tuple,
          prefix_cache_bytes: int | None, block_size: int) -> Placed:
    """The memory plan for `specs` and what the lanes share; `prefix_cache_bytes`
    None: the plan's."""
    model_type = getattr(loaded.model, "model_type", None) or type(loaded.model).__module__
    # A cache kind mlx-lm cannot batch fails here, before any lane starts.
    profile = cache_profile(loaded.model, model_type.rsplit(".", 1)[-1])
    plan, models = plan_lanes(loaded, specs, budget_bytes, aux)
    if prefix_cache_bytes is None:
        prefix_cache_bytes = plan.prefix_cache_bytes
    prefix_cache = PrefixCache(block_size, prefix_cache_bytes)
    prefix_cache.off_reason = profile.prefix_off_reason
    return Placed(plan, prefix_cache, profile, models)


def _requests(loaded: LoadedModel, specs: list[LaneSpec], quantized: bool,
              probe) -> list[LaneRequest]:
    out = []
    for spec in specs:
        fmt = spec.weight_format
        slots = (spec.config or LaneConfig()).max_batch
        if fmt == "auto":  # a CPU lane of quantized weights: the probe's choice
            matmul = probe().path if spec.device == "cpu" and quantized else None
            out.append(lane_request(spec.name, spec.device, quantized, matmul, slots))
        elif fmt == loaded.weight_format:
            out.append(LaneRequest(spec.name, spec.device, max_sequences=slots))
        else:  # asked for by name: no probe needed, only room
            out.append(LaneRequest(spec.name, spec.device, fmt, True, slots))
    return out


def plan_lanes(loaded: LoadedModel, specs: list[LaneSpec], budget_bytes: int | None = None,
               aux: tuple = ()) -> tuple[MemoryPlan, dict[str, object]]:
    """The memory plan for `specs` and the model object each enabled lane
    runs: the loaded model, or for a lane with its own copy a function that
    builds it (ModelRunner.start calls it on the lane's thread). `aux`:
    the AuxModels loaded beside it (a draft model)."""
    shape = model_shape(loaded.model, loaded.context_length)
    budget, unified = machine_budget(shape.weight_bytes)
    if budget_bytes is not None:
        budget = budget_bytes
    probed: list[CpuMatmul] = []

    def probe() -> CpuMatmul:
        if not probed:
            probed.append(choose(loaded.model) or CpuMatmul(
                "mlx", "MLX's op (no quantized projection to time: only an embedding)"))
        return probed[0]

    requests = _requests(loaded, specs, shape.is_quantized, probe)
    plan = plan_memory(shape, requests, budget, unified_memory=unified, aux=aux)
    wanted = requests[0].own_format
    if wanted is not None and requests[0].own_format_faster:
        # Lanes that want the primary's own format share it once the primary
        # converts in place (two CPU lanes: one float32 copy, not two).
        sharing = [r if i == 0 or r.own_format != wanted or r.device != requests[0].device
                   else LaneRequest(r.name, r.device, max_sequences=r.max_sequences)
                   for i, r in enumerate(requests)]
        converted = plan_memory(shape, sharing, budget, unified_memory=unified, aux=aux)
        if converted.lanes[0].weight_format == wanted:
            plan = converted
    if probed:
        plan = _with_matmul(plan, probed[0])
    kernels = plan.cpu_matmul == "tandem"
    models: dict[str, object] = {}
    first = plan.lanes[0]
    # The loaded arrays may take the kernels' packed layout only where no
    # GPU lane reads them (MLX's kernels cannot).
    sharers = [lane for lane in plan.lanes
               if lane.enabled and (lane is first or lane.weight_format == "shared")]
    cpu_only = all(lane.device == "cpu" for lane in sharers)
    if first.weight_format not in ("shared", loaded.weight_format):
        with _on(first.device):
            with_weight_format(loaded, first.weight_format)
    for lane in plan.lanes:
        if not lane.enabled:
            continue
        if lane is first or lane.weight_format == "shared":
            models[lane.name] = loaded.model
            if lane.device == "cpu" and kernels:
                qmm.install(loaded.model, pack=cpu_only)  # else per call: a GPU lane keeps MLX's
            if lane.device == "cpu":
                attention.install(loaded.model)  # the same: chosen per call
                swiglu.install(loaded.model)
        else:  # its own copy: another format, or the same where memory is not shared
            fmt = "quantized" if lane.weight_format == loaded.weight_format else lane.weight_format
            models[lane.name] = functools.partial(_own_copy, loaded.source, fmt, lane.device,
                                                  kernels)
    return plan, models


def _with_matmul(plan: MemoryPlan, choice: CpuMatmul) -> MemoryPlan:
    """The plan with what its CPU lanes run: the probe's choice, or MLX's op
    where it chose a float32 copy the plan had no room for, or forced
    kernels that are not built."""
    path, why = choice.path, choice.why
    chosen = dataclasses.replace(plan, cpu_matmul=path)
    cpu = [lane.name for lane in plan.lanes if lane.device == "cpu" and lane.enabled]
    if path == "float32" and cpu and "a float32 copy" not in map(chosen.matmul, cpu):
        path, why = "mlx", f"MLX's op: a float32 copy was wanted ({why}) but has no room"
    elif path == "tandem" and qmm.kernels() is None:
        path, why = "mlx", f"MLX's op: Tandem's kernels were forced but are not used " \
                           f"({qmm.status()[1]})"
    return dataclasses.replace(plan, cpu_matmul=path, cpu_matmul_why=why)


def _own_copy(source, weight_format: str, device: str, kernels: bool = False):
    """A lane's own copy of the weights, built on that lane's thread as it
    starts (Engine() returns at once; a 1-8B conversion takes seconds)."""
    with _on(device):
        model = load_model(source, weight_format).model
    if device == "cpu" and kernels:
        qmm.install(model, pack=True)  # its own copy: no GPU lane reads it
    if device == "cpu":
        attention.install(model)
        swiglu.install(model)
    return model


def _on(device: str):
    """A CPU lane's weights are converted on the CPU: on a CUDA machine the
    default device is the GPU, where a dequantization would compile kernels
    (tens of seconds at first use) and compete with the GPU lane's warm-up."""
    return mx.stream(mx.cpu) if device == "cpu" else contextlib.nullcontext()
