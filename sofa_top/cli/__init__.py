"""The ``sofa-top`` command line (``main`` is the console script)."""

from sofa_top.cli.main import main

__all__ = ["main"]
