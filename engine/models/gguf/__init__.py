"""GGUF files: checked before anything reads them (`check`), metadata (`meta`),
tensors into MLX quantized arrays (`tensors`), the tokenizer (`tokenizer`) and
the model they make for mlx-lm (`convert`)."""
