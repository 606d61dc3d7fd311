"""GGUF files: checked before anything reads them (`check`), metadata (`meta`;
`values` makes either reader's plain Python), tensors into MLX quantized arrays
(`tensors`), the vocabulary and its BOS/EOS rules (`vocab`), the tokenizer
(`tokenizer`) and the model they make for mlx-lm (`convert`)."""
