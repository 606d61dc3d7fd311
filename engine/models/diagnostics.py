"""What MLX runs on here: versions and a GPU kernel check, for self-tests."""

from __future__ import annotations

import mlx.core as mx


def mlx_version() -> str:
    return mx.__version__


def gpu_check() -> str:
    """'none' without a GPU, 'ok' when a few kernels ran on it. Raises when MLX
    reports a GPU but cannot run on it: in a macOS bundle, a missing or
    misplaced mlx.metallib (packaging/README.md)."""
    if not mx.is_available(mx.gpu):
        return "none"
    try:
        with mx.stream(mx.gpu):
            a = mx.random.normal((64, 64))
            mx.eval(mx.softmax(a @ a.T, axis=-1).sum())
    except Exception as e:
        raise RuntimeError(f"MLX reports a GPU but cannot run kernels on it: {e}") from e
    return "ok"
