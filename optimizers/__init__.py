"""Everything about optimizing a workload: the advice the verdicts give, ``compare`` (re-run under
toggles), headroom, the parallelism search and depth-first execution (headless: no UI imports
here).

Importing this package imports no framework: the TUI imports ``sofa_top.optimizers.compare`` and
the verdicts ``sofa_top.optimizers.advice``, and neither may pull in torch. ``depth_first`` and
its report types load on first access (PEP 562), so ``from sofa_top.optimizers import
depth_first`` still works.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sofa_top.optimizers.depth_first import (
        ChunkDecision,
        RunReport,
        depth_first,
        depth_first_report,
    )

__all__ = ["ChunkDecision", "RunReport", "depth_first", "depth_first_report"]

_DEPTH_FIRST = "sofa_top.optimizers.depth_first"


def __getattr__(name: str) -> Any:
    """Import ``sofa_top.optimizers.depth_first`` (and torch) on first use of its names."""
    if name in __all__:
        value = getattr(importlib.import_module(_DEPTH_FIRST), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type: the name ``depth_first`` always means the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the subpackage binds it as this package's ``depth_first`` attribute, which
        # would shadow the function of the same name for every later
        # ``from sofa_top.optimizers import depth_first``: keep the function there instead.
        if name == "depth_first" and isinstance(value, types.ModuleType):
            value = value.depth_first
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
