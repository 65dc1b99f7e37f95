"""What :func:`depth_first_report` returns: the runs found and what each decided, per input."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkDecision:
    """What a run does for one input signature (shape, dtype, mode), and why."""

    shape: tuple[int, ...]
    dtype: str
    mode: str  # "eval" or "train" (some BatchNorm uses batch statistics)
    grad: bool  # autograd recorded the run
    split: str  # "batch", "channels", "batch+channels" or "none"
    tile: tuple[int, int] | None  # (samples, channels) per chunk
    workers: int  # >1: threads taking whole chunks; 0: chunks in turn, layers multithreaded
    chunk_bytes: int | None
    chunked: bool  # True: runs depth-first; False: original layer-by-layer path
    speedup: float | None  # measured original time / chunked time; None if not measured
    reason: str


@dataclass(frozen=True)
class RunReport:
    """One run of memory-bound layers found by :func:`depth_first`."""

    name: str
    layers: tuple[str, ...]
    source: str  # "fx" or "sequential"
    decisions: tuple[ChunkDecision, ...]
