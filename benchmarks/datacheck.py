"""The cost of compare's data-stream check on the hot path: one fingerprint per batch, and the
wrapped ``DataLoader`` iterator that computes it, vs the plain iterator.

Prints, per batch shape, the fingerprint's time per batch (median and min-max over ``--repeats``
blocks of ``--batches`` calls) and the per-batch cost of a wrapped DataLoader over an in-memory
dataset (paired blocks: plain, wrapped, plain, wrapped ...). Usage::

    python benchmarks/datacheck.py [--repeats 7] [--batches 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from sofa_top.agent.datacheck import DataCheck, fingerprint, wrap_next


def _per_call_us(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} us ({min(values):.1f}-{max(values):.1f})"


def fingerprints(repeats: int, batches: int) -> None:
    """The fingerprint alone, on batches of common shapes."""
    shapes: dict[str, Any] = {
        "torch images 32x3x224x224 + labels": (
            torch.randn(32, 3, 224, 224),
            torch.randint(0, 1000, (32,)),
        ),
        "torch tokens 16x512 (int64) + mask": {
            "input_ids": torch.randint(0, 30000, (16, 512)),
            "attention_mask": torch.ones(16, 512, dtype=torch.int64),
        },
        "numpy 64x128 float32 + labels": (
            np.random.rand(64, 128).astype(np.float32),
            np.arange(64),
        ),
    }
    for name, batch in shapes.items():
        times = [_per_call_us(lambda b=batch: fingerprint(b), batches) for _ in range(repeats)]
        print(f"fingerprint, {name}: {_spread(times)} per batch")


def loader(repeats: int, batches: int) -> None:
    """A DataLoader iterated with and without the check, in paired blocks."""
    data = TensorDataset(torch.randn(4096, 3, 32, 32), torch.randint(0, 10, (4096,)))
    cls = type(iter(DataLoader(data, batch_size=32)))
    plain_next = cls.__next__
    checked_next = wrap_next(plain_next, DataCheck(lambda _d: None))

    def block(nxt: Callable[[Any], Any]) -> float:
        cls.__next__ = nxt  # type: ignore[method-assign]
        it = iter(DataLoader(data, batch_size=32))
        n = 0
        t0 = time.perf_counter()
        while n < batches:
            try:
                next(it)
            except StopIteration:
                it = iter(DataLoader(data, batch_size=32))
                continue
            n += 1
        return (time.perf_counter() - t0) / batches * 1e6

    extra: list[float] = []
    plain: list[float] = []
    try:
        for _ in range(repeats):
            p, c = block(plain_next), block(checked_next)
            plain.append(p)
            extra.append(c - p)
    finally:
        cls.__next__ = plain_next  # type: ignore[method-assign]
    print(f"DataLoader batch 32x3x32x32, plain: {_spread(plain)} per batch")
    print(f"  with the data check: +{_spread(extra)} per batch (paired blocks)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batches", type=int, default=2000)
    a = ap.parse_args()
    torch.set_num_threads(1)
    fingerprints(a.repeats, a.batches)
    loader(a.repeats, a.batches)


if __name__ == "__main__":
    main()
