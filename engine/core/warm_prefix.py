"""The reference engine's routing rule (the seed's): warm follow-ups to the
CPU while the GPU is busy. Plain Python over `LaneView` / `RequestView`."""

from __future__ import annotations

from .router import LaneView, Placement, RequestView, _leave_if_not_allowed, _stay


def _gpu(lanes: list[LaneView]) -> LaneView | None:
    return next((lane for lane in lanes if lane.device == "gpu"), None)


def _cpu(lanes: list[LaneView]) -> LaneView | None:
    return next((lane for lane in lanes if lane.device == "cpu"), None)


class WarmPrefixPolicy:
    """The reference engine's rule: while the GPU is busy, a request whose
    uncached suffix is short runs wholly on the CPU; everything else on the GPU."""

    name = "warm-prefix"

    def __init__(self, max_uncached_tokens: int = 128):
        self.max_uncached_tokens = max_uncached_tokens

    def place(self, request: RequestView, lanes: list[LaneView]) -> Placement:
        gpu, cpu = _gpu(lanes), _cpu(lanes)
        if gpu is None or cpu is None:
            lane = (gpu or cpu or lanes[0])
            return Placement(lane.name, f"only {lane.device.upper()} allowed", decode_lane=lane.name)
        warm = f"{request.cached_tokens}/{request.prompt_tokens} tokens cached"
        if gpu.is_busy and request.uncached_tokens <= self.max_uncached_tokens:
            return Placement(cpu.name, f"warm prefix {warm}; GPU busy (batch {gpu.batch_size}, "
                             f"{gpu.queue_depth} queued)", decode_lane=cpu.name)
        why = "GPU idle" if not gpu.is_busy else f"{request.uncached_tokens} uncached tokens"
        return Placement(gpu.name, f"{why}; {warm}", decode_lane=gpu.name)

    def place_decode(self, request, current, lanes):
        return _stay(current, lanes)

    def reconsider(self, request, current, lanes):
        return _leave_if_not_allowed(current, lanes)
