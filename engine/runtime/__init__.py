"""What runs: lanes, the model runner, batching, caches and sampling on MLX
(docs/ARCHITECTURE.md). Imports the core and the models, never the public API
above it."""
