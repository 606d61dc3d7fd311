"""Entry point of the bundle: the same command line as `tandem`."""

from app.cli import run

run()
