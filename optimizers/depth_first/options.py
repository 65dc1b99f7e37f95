"""What a run is configured with, and the shapes it works out (shared by the run and the tuner)."""

from __future__ import annotations

from dataclasses import dataclass

# Shape before each op and of the output, or why the run cannot be chunked.
Shapes = list[tuple[int, ...]] | str


@dataclass(frozen=True)
class Options:
    """The options :func:`depth_first` was called with (``base_bytes``: from the caches)."""

    chunk_bytes: int | None
    tune: bool
    min_speedup: float
    base_bytes: int
    use_fx: bool
    parallel_chunks: bool | None
