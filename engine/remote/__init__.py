"""Remote lanes: OpenAI-compatible servers that finish whole requests,
routed by the same director as the local lanes. No MLX here: HTTP (httpx)
on one asyncio loop thread per engine. The decisions (capacity, the circuit
breaker, the learned cost) are plain Python in engine/core/remote*.py."""
