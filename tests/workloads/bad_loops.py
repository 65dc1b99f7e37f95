"""PyTorch loops that fail the way real ones do, for the bad-input tests.

``--case lying-length``: a Dataset whose ``__len__`` promises 4096 samples but holds 1024: the
DataLoader asks for index 1024 and ``__getitem__`` raises IndexError (in the main process).
``--case worker-raises``: ``DataLoader(num_workers=2)`` whose ``__getitem__`` raises ValueError
at index 700, inside a worker process.
``--case generator-ends``: ``next()`` on a generator of 300 batches, 10_000 times: the 301st
raises StopIteration out of the loop.

Each trains a small model on what it gets, prints ``LOOP_STARTED`` first, and dies with the
error (exit code 1, the traceback on stderr).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, held: int, claimed: int, raise_at: int | None = None) -> None:
        self.x = torch.randn(held, 32)
        self.claimed = claimed
        self.raise_at = raise_at

    def __len__(self) -> int:
        return self.claimed

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.raise_at is not None and i == self.raise_at:
            raise ValueError(f"corrupt sample {i}")
        return self.x[i], i % 2  # IndexError past what is held


def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for _ in range(300):
        x = torch.randn(16, 32)
        yield x, (x.sum(1) > 0).long()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=("lying-length", "worker-raises", "generator-ends"))
    a = p.parse_args()
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    print("LOOP_STARTED", flush=True)
    if a.case == "generator-ends":
        gen = batches()
        for _ in range(10_000):
            train(*next(gen))
        return
    if a.case == "lying-length":
        loader = DataLoader(Samples(1024, 4096), batch_size=16)
    else:
        loader = DataLoader(Samples(4096, 4096, raise_at=700), batch_size=16, num_workers=2)
    for x, y in loader:
        train(x, torch.as_tensor(y))


if __name__ == "__main__":
    main()
