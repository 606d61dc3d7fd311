"""Tandem's desktop app (PySide6). Talks to the engine only through its API
and events; never imports mlx."""
