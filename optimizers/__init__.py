"""Model optimizers that sofa-top can suggest or apply (headless: no UI imports here).

``depth_first`` and friends are loaded on first use: importing this package (every ``sofa-top``
command does, for the ``compare`` parser) must not import torch, which costs a second or more
and is an optional dependency.
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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module("sofa_top.optimizers.depth_first")
    for public in __all__:
        globals()[public] = getattr(module, public)
    return globals()[name]


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the submodule ``depth_first`` binds it on this package; the package's
        # ``depth_first`` is the function of that name (as when this package imported it).
        if name == "depth_first" and isinstance(value, types.ModuleType):
            value = value.depth_first
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
