"""Tandem's version, from one place: pyproject.toml. Installed (`make`,
the bundle, which carries the package's metadata) it comes from the
package metadata; from a bare checkout, from pyproject.toml itself."""

from __future__ import annotations

from pathlib import Path


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("tandem")
    except PackageNotFoundError:
        pass
    import tomllib

    try:
        with open(Path(__file__).resolve().parents[2] / "pyproject.toml", "rb") as f:
            return tomllib.load(f)["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"
