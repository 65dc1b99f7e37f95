"""An input-bound torch loop: DataLoader(num_workers=0) over a dataset whose ``__getitem__`` is
slow pure Python, feeding a tiny model.

Usage: ``python torch_input_bound.py [SECONDS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30).
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


class SlowDataset(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        # pure-Python "decoding": the loader, not the model, is the bottleneck
        acc = 0
        for i in range(20_000):
            acc = (acc + i * index) % 9973
        return torch.full((16,), float(acc)), index % 4


def main() -> None:
    # One intra-op thread: the model is tiny, and on a loaded machine OpenMP's barrier waits for
    # a descheduled sibling thread, which makes the tiny step look like most of the time
    # (28% input, 71% compute seen on 2 busy cores).
    torch.set_num_threads(1)
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=8, shuffle=False, num_workers=0)
    loss_fn = nn.CrossEntropyLoss()
    end = time.monotonic() + duration()
    while time.monotonic() < end:
        for x, y in loader:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if time.monotonic() >= end:
                break


if __name__ == "__main__":
    main()
