"""Model aliases: names a client asks for that this server does not serve,
mapped to one it does (`tandem serve --alias claude-opus-4-8=default`).
NAME may be a glob (`'claude-*=default'`: fnmatch's *, ? and [...], matched
whole and case-sensitively); exact names are tried first, then the globs in
the order given. MODEL is a served model id, or 'default' for the served
model. A name the server serves is never an alias: it answers as itself."""

from __future__ import annotations

from fnmatch import fnmatchcase

GLOB_CHARS = "*?["


def parse_alias(text: str) -> tuple[str, str]:
    """'NAME=MODEL' as (NAME, MODEL); ValueError saying what is wrong."""
    name, sep, model = text.partition("=")
    name, model = name.strip(), model.strip()
    if not sep or not name or not model:
        raise ValueError(f"--alias {text!r}: expected NAME=MODEL (MODEL a served model id, "
                         "or 'default'), e.g. claude-opus-4-8=default.")
    return name, model


def check_aliases(aliases: tuple[tuple[str, str], ...], served: tuple[str, ...]) -> None:
    """Every alias maps to a served model; ValueError naming the one that does not."""
    for name, model in aliases:
        if model != "default" and model not in served:
            raise ValueError(f"--alias {name}={model}: this server serves "
                             f"{', '.join(repr(i) for i in served)}; MODEL must be one of "
                             "them, or 'default'.")


def resolve(name: str, aliases: tuple[tuple[str, str], ...],
            served: tuple[str, ...]) -> str | None:
    """The served id `name` stands for: itself if served, else its alias's
    model (exact names first, then globs in order); None if neither."""
    if name in served:
        return name
    exact = next((model for alias, model in aliases if alias == name), None)
    if exact is None:
        exact = next((model for alias, model in aliases
                      if any(c in alias for c in GLOB_CHARS) and fnmatchcase(name, alias)),
                     None)
    if exact is None:
        return None
    return served[0] if exact == "default" else exact


def listed_aliases(aliases: tuple[tuple[str, str], ...], served: tuple[str, ...]) -> list[str]:
    """The exact alias names (globs name no model), for /v1/models."""
    out: list[str] = []
    for name, _ in aliases:
        if not any(c in name for c in GLOB_CHARS) and name not in served and name not in out:
            out.append(name)
    return out
