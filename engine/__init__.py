"""Tandem's inference engine: MLX lanes, continuous batching, a shared prefix
cache and a router. Imports no Qt."""

from .blas import preload_openblas

preload_openblas()  # must run before anything imports mlx

from .engine import Engine, LaneSpec, RequestHandle, default_lanes, gpu_available  # noqa: E402
from .errors import EngineError  # noqa: E402
from .events import (  # noqa: E402
    Calibrated, EngineErrorEvent, Finished, LaneSample, Migrated, Queued, Routed, Token)
from .lane import LaneConfig  # noqa: E402
from .loader import LoadedModel, load_model  # noqa: E402
from .params import SamplingParams  # noqa: E402

__all__ = [
    "Calibrated", "Engine", "EngineError", "EngineErrorEvent", "Finished", "LaneConfig", "LaneSample",
    "LaneSpec", "LoadedModel", "Migrated", "Queued", "RequestHandle", "Routed",
    "SamplingParams", "Token", "default_lanes", "gpu_available", "load_model",
]
