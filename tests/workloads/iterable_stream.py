"""A torch loop over a streaming ``IterableDataset`` (the shape of a streaming LM dataset).

``--shard none``: ``__iter__`` streams the whole dataset whatever worker runs it (the common
form: with N DataLoader workers every sample is seen N times). ``--shard worker``: it yields only
the items ``i % num_workers == id`` of ``get_worker_info()``. ``--shard offset``: it calls
``get_worker_info()`` but only to start each worker at its own offset, and then reads the whole
stream, wrapping around: every sample still reaches every worker, and the first items of two
workers differ (the shape the agent's first-items probe cannot tell from sharding; compare's
data check must). Each item costs ``--item-ms`` of sleep (a read) plus a little
CPU, so the loop is input-bound with no workers. An epoch is ``--items`` items; the loop runs
epochs for ``--seconds`` and prints ``EPOCH <n> <batches>`` after each and ``READY`` after the
first batch. ``--fail-after N``: the N-th item of a stream raises (a corrupt record): in a
DataLoader worker, the loop gets it as the worker's error.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

FEATURES = 32


class Stream(IterableDataset[tuple[torch.Tensor, int]]):
    def __init__(self, items: int, shard: str, item_ms: float, fail_after: int = 0) -> None:
        self.items = items
        self.shard = shard
        self.item_s = item_ms / 1000.0
        self.fail_after = fail_after

    def _indices(self) -> list[int]:
        info = get_worker_info()
        idx = list(range(self.items))
        if self.shard == "worker" and info is not None:
            return idx[info.id :: info.num_workers]
        if self.shard == "offset" and info is not None:
            start = info.id * self.items // info.num_workers
            return idx[start:] + idx[:start]
        return idx

    def __iter__(self) -> Iterator[tuple[torch.Tensor, int]]:
        for n, i in enumerate(self._indices(), 1):
            if n == self.fail_after:
                raise RuntimeError(f"corrupt record {i}")
            time.sleep(self.item_s)
            g = torch.Generator().manual_seed(i)
            yield torch.randn(FEATURES, generator=g), i % 4


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shard", choices=("none", "worker", "offset"), default="none")
    p.add_argument("--items", type=int, default=256)
    p.add_argument("--item-ms", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--fail-after", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Linear(FEATURES, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Stream(a.items, a.shard, a.item_ms, a.fail_after),
        batch_size=a.batch,
        num_workers=a.workers,
    )
    end = time.monotonic() + a.seconds
    epoch = 0
    ready = False
    while time.monotonic() < end:
        batches = 0
        for batches, (x, y) in enumerate(loader, 1):  # noqa: B007 (printed after it)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            opt.step()
            if not ready:
                print("READY", flush=True)
                ready = True
            if time.monotonic() >= end:
                break
        else:
            print(f"EPOCH {epoch} {batches}", flush=True)
            epoch += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
