"""Tandem's OpenAI-compatible local server (`tandem serve`): MLX-free, Qt-free."""
