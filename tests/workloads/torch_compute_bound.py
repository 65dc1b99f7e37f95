"""A compute-bound torch CPU training loop: conv forward + backward + SGD step on fixed tensors.

Usage: ``python torch_compute_bound.py [SECONDS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30).
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch import nn


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the same shape on any core count; no OpenMP barrier waits
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 64, 64)
    y = torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()
    end = time.monotonic() + duration()
    while time.monotonic() < end:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
