"""CPU cache sizes, read from Linux sysfs, used to size depth-first chunks."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")

# Conservative values for machines without sysfs (macOS, containers with /sys hidden).
FALLBACK_L1D = 32 * 1024
FALLBACK_L2 = 1024 * 1024
FALLBACK_L3 = 32 * 1024 * 1024


@dataclass(frozen=True)
class CacheSizes:
    """Per-core L1d and L2, shared L3, in bytes; ``source`` says where they came from."""

    l1d: int
    l2: int
    l3: int
    source: str


def parse_size(text: str) -> int:
    """Parse a sysfs cache size such as ``512K``, ``8192K`` or ``32M`` into bytes."""
    text = text.strip().upper()
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def read_cache_sizes(root: Path = SYSFS_CACHE) -> CacheSizes:
    """Read cache sizes from ``root`` (a sysfs ``cpuN/cache`` folder), with fallbacks."""
    found: dict[int, int] = {}
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        entries = []
    for entry in entries:
        try:
            level = int((entry / "level").read_text())
            kind = (entry / "type").read_text().strip()
            size = parse_size((entry / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        found[level] = max(found.get(level, 0), size)
    if not found:
        return CacheSizes(FALLBACK_L1D, FALLBACK_L2, FALLBACK_L3, "fallback")
    l1d = found.get(1, FALLBACK_L1D)
    l2 = found.get(2, FALLBACK_L2)
    l3 = found.get(3, FALLBACK_L3)
    source = "sysfs" if {1, 2, 3} <= found.keys() else "sysfs+fallback"
    return CacheSizes(l1d, l2, l3, source)


@functools.cache
def cache_sizes() -> CacheSizes:
    """This machine's cache sizes (cached: sysfs does not change while we run)."""
    return read_cache_sizes()


def default_chunk_bytes(threads: int | None = None, sizes: CacheSizes | None = None) -> int:
    """Bytes of one tensor chunk so that a chunk's input and output stay in cache.

    Intra-op threads each take a share of a chunk and keep it in their own L2, so the chunk
    grows with the thread count; half of each share is left for the op's output. Capped at a
    quarter of L3, which all threads share.
    """
    sizes = sizes or cache_sizes()
    if threads is None:
        threads = max(1, min(os.cpu_count() or 1, _torch_threads()))
    target = sizes.l2 * max(1, threads) // 2
    return max(32 * 1024, min(target, sizes.l3 // 4))


def _torch_threads() -> int:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional for the rest of sofa-top
        return os.cpu_count() or 1
    return int(torch.get_num_threads())
