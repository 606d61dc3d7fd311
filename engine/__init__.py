"""Tandem's inference engine: MLX lanes, continuous batching, a shared prefix
cache and a router. Imports no Qt.

Importing the package is cheap: it loads the system OpenBLAS (which must come
before MLX) and nothing else. The public names below import their modules,
and with them MLX, mlx-lm and transformers (~1 s), on first use, so that an
app can show its window first and load the engine on a worker thread.
Light modules (`engine.events`, `engine.params`, `engine.errors`) can be
imported directly without pulling in MLX.
"""

from importlib import import_module

from .blas import preload_openblas

preload_openblas()  # must run before anything imports mlx

_PUBLIC = {
    "Calibrated": "events", "EngineErrorEvent": "events", "Finished": "events",
    "LaneSample": "events", "Migrated": "events", "Queued": "events", "Routed": "events",
    "Token": "events", "MemoryPlanned": "events", "EngineError": "errors", "SamplingParams": "params",
    "Engine": "engine", "LaneSpec": "laneconfig", "LaneInfo": "laneconfig",
    "RequestHandle": "handle", "default_lanes": "engine", "gpu_available": "engine",
    "LaneConfig": "laneconfig",
    "LoadedModel": "loader", "load_model": "loader", "MemoryPlan": "memory",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(list(globals()) + list(_PUBLIC))
