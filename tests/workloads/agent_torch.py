"""PyTorch loops for agent tests; each measures its own input fraction.

``--mode input``: ``DataLoader(num_workers=--workers)`` over a dataset whose ``__getitem__``
is slow pure Python, feeding a tiny model (input-bound with 0 workers).
``--mode compute``: a cheap ``__getitem__`` feeding a heavier model (compute-bound).
``--mode optimizer``: no DataLoader at all; one preloaded batch, ``optimizer.step()`` per step
(it waits for no input, so its own fraction is 0; ``SELF_STEP_MS`` is its mean step time).

The workload times each ``next()`` on the loader itself and prints, last,
``SELF_INPUT_FRACTION=<sum of waits / loop time>`` over the steps after ``--warmup``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES = 64


class Samples(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, n: int, work: int) -> None:
        self.n = n
        self.work = work

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        acc = 0
        for i in range(self.work):  # pure-Python "decoding"
            acc = (acc + i * (index + 1)) % 9973
        return torch.full((FEATURES,), float(acc) / 9973.0), index % 4


def model_for(mode: str) -> nn.Module:
    if mode == "input":
        return nn.Linear(FEATURES, 4)
    return nn.Sequential(
        nn.Linear(FEATURES, 512),
        nn.ReLU(),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 4),
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("input", "compute", "optimizer"), default="input")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(0)
    n = a.warmup + a.steps
    model = model_for("input" if a.mode == "input" else "compute")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()

    waits = 0.0
    start = 0.0
    if a.mode == "optimizer":
        x = torch.randn(a.batch * 4, FEATURES)
        y = torch.randint(0, 4, (a.batch * 4,))
        for i in range(n):
            if i == a.warmup:
                start = time.perf_counter()
            train(x, y)
        total = time.perf_counter() - start
        print(f"SELF_STEP_MS={total / a.steps * 1e3:.3f}")
    else:
        work = 8_000 if a.mode == "input" else 50
        loader = DataLoader(
            Samples(n * a.batch, work), batch_size=a.batch, shuffle=False, num_workers=a.workers
        )
        it = iter(loader)
        for i in range(n):
            if i == a.warmup:
                start = time.perf_counter()
            t0 = time.perf_counter()
            x, y = next(it)
            if i >= a.warmup:
                waits += time.perf_counter() - t0
            train(x, y)
        total = time.perf_counter() - start
        for _ in it:  # end of data: closes the agent's last step
            pass
        if a.workers:
            print(f"WORKLOAD_PID={os.getpid()}")
    print(f"SELF_STEPS_PER_S={a.steps / total:.3f}")
    print(f"SELF_INPUT_FRACTION={waits / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
