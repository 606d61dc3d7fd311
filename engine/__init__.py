"""Tandem's inference engine: MLX lanes, continuous batching, a shared prefix
cache and a router. Imports no Qt.

Rooms (docs/ARCHITECTURE.md): `engine.core` decides (plain Python, never
MLX), `engine.models` loads, `engine.runtime` runs (MLX), `engine.sim`
simulates with the core's own code; `engine.engine`, `engine.remote_model`,
`engine.handle` and `engine.interface` (the `EngineAPI` protocol both engines
satisfy, `Capabilities`, `Prepared`) are the public API, named here.

Importing the package is cheap: it loads the system OpenBLAS (which must come
before MLX) and nothing else. The public names below import their modules,
and with them MLX, mlx-lm and transformers (~1 s), on first use, so that an
app can show its window first and load the engine on a worker thread. The
vocabulary (events, `SamplingParams`, `EngineError`, `LaneSpec`,
`LaneConfig`, `MemoryPlan`) lives in `engine.core` and pulls in no MLX.
"""

from importlib import import_module

from .runtime.blas import preload_openblas

preload_openblas()  # must run before anything imports mlx

_PUBLIC = {
    "Calibrated": "core.events", "EngineErrorEvent": "core.events", "Finished": "core.events",
    "LaneSample": "core.events", "Migrated": "core.events", "Queued": "core.events",
    "Routed": "core.events", "Token": "core.events", "MemoryPlanned": "core.events",
    "EngineError": "core.errors", "SamplingParams": "core.params", "Grammar": "core.params",
    "LaneSpec": "core.laneconfig", "LaneInfo": "core.laneconfig", "LaneConfig": "core.laneconfig",
    "MemoryPlan": "core.memory", "format_bytes": "core.memory",
    "CONTEXT_POLICIES": "core.context_view", "fit_context": "core.context_view",
    "context_text_chars": "core.context_view",
    "RemoteSpec": "core.remote", "parse_remote": "core.remote",
    "is_local_host": "core.remote",
    "Engine": "engine", "default_lanes": "engine", "gpu_available": "engine",
    "RemoteModelEngine": "remote_model",
    "EngineAPI": "interface", "Capabilities": "interface", "Prepared": "interface",
    "RequestHandle": "handle",
    "LoadedModel": "models.loader", "load_model": "models.loader",
    "openblas_advice": "runtime.blas", "loaded_blas": "runtime.blas",
    "cpu_matmul": "runtime.qmm", "cpu_attention": "runtime.attention",
    "release_saved_kv": "runtime.kv_owners",
    "load_embedding_model": "models.embedding",
    "strict_loads": "models.call_json", "cut_call": "models.call_json",
    "partial_input": "models.call_json",
    "ChatImage": "images", "ImageBudget": "images", "decode_image": "images",
    "decode_data_url": "images", "decode_base64": "images",
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
