"""The one error type the engine raises for things a user can fix."""


class EngineError(Exception):
    """A failure explained in words a user understands.

    `kind` is a short machine-readable tag ("model-not-found", "not-a-model",
    "corrupt-model", "unsupported-architecture", "prompt-too-long", ...).
    """

    def __init__(self, message: str, kind: str = "error"):
        super().__init__(message)
        self.kind = kind
