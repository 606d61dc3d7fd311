"""What loads: model files to MLX models and tokenizers (docs/ARCHITECTURE.md).

The loader (the bundled default, GGUF files, model folders, Hub repo ids),
GGUF reading in `gguf/`, the catalog of models on disk, where the bundled
files are, and the self-test's diagnostics. Imports the core, never the runtime.
"""
