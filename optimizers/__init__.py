"""Model optimizers that sofa-top can suggest or apply (headless: no UI imports here)."""

from sofa_top.optimizers.depth_first import (
    ChunkDecision,
    RunReport,
    depth_first,
    depth_first_report,
)

__all__ = ["ChunkDecision", "RunReport", "depth_first", "depth_first_report"]
