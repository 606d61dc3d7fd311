"""Metal's wired limit, raised while an engine with a GPU lane is open, as
mlx-lm's `generate` does for one call (`mlx_lm.generate.wired_limit`): the
memory MLX may keep resident ("wired") goes up to the device's recommended
working set, so a model's weights and KV are not paged out between steps.
Process-wide in MLX, so it is counted: the first engine raises it, the last
one closed puts back what was there (the app loads the next model while the
last one closes). Nothing happens without Metal (CPU, CUDA)."""

from __future__ import annotations

import threading

import mlx.core as mx

_lock = threading.Lock()
_holders = 0
_previous: int | None = None


def _metal() -> bool:
    try:
        return bool(mx.metal.is_available())
    except Exception:
        return False


def acquire(model_bytes: int) -> str | None:
    """Raise the limit for an engine whose weights take `model_bytes`; a
    note when they come near the recommended working set (as mlx-lm warns:
    expect paging), else None. Pair with `release`."""
    global _holders, _previous
    if not _metal():
        return None
    recommended = int(mx.device_info().get("max_recommended_working_set_size", 0) or 0)
    if not recommended:
        return None
    with _lock:
        if _holders == 0:
            _previous = mx.set_wired_limit(recommended)
        _holders += 1
    if model_bytes > 0.9 * recommended:
        return (f"The model's weights take {model_bytes / 2**30:.1f} GiB, close to the "
                f"{recommended / 2**30:.1f} GiB this Mac's GPU should keep resident: "
                "expect it to be slow (a smaller or more quantized model fits better).")
    return None


def release(streams: list = ()) -> None:
    """An engine that `acquire`d closed: once its `streams` have finished
    their work (the limit must not change under an evaluation in flight), the
    last one out puts the previous limit back."""
    global _holders, _previous
    if not _metal():
        return
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders:
            return
        previous, _previous = _previous, None
    for stream in streams:
        mx.synchronize(stream)
    if previous is not None:
        mx.set_wired_limit(previous)
