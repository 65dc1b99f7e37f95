"""Everything about optimizing a workload: the toggles' advice, ``compare``, headroom, the
parallelism search, and depth-first execution (headless: no UI imports here).

``from sofa_top.optimizers import depth_first`` is the public way to apply BrainSlug's
depth-first execution; it is imported on first use, so that importing this package (the TUI,
the verdicts asking ``advice``) never imports torch.
"""

from __future__ import annotations

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
    # PEP 562: the depth-first names come from torch-importing code, loaded only when asked for
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module = importlib.import_module("sofa_top.optimizers.depth_first")
    # the import bound the submodule to ``depth_first`` here: the public name is the function
    for public in __all__:
        globals()[public] = getattr(module, public)
    return globals()[name]
