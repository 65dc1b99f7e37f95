"""PyTorch loops for agent tests; each measures its own input fraction.

``--mode input``: ``DataLoader(num_workers=--workers)`` over a dataset whose ``__getitem__``
is slow pure Python, feeding a tiny model (input-bound with 0 workers).
``--mode compute``: a cheap ``__getitem__`` feeding a model about a hundred times heavier than
the input (compute-bound on any machine: one intra-op thread, so the ratio does not move with
the core count).
``--mode optimizer``: no DataLoader at all; one preloaded batch, ``optimizer.step()`` per step
(it waits for no input, so its own fraction is 0; ``SELF_STEP_MS`` is its mean step time).

The workload times each ``next()`` on the loader itself and prints, last,
``SELF_INPUT_FRACTION=<sum of waits / loop time>`` over the steps after ``--warmup``, on the
agent's step boundaries (a step runs from one batch's arrival to the next one's, the last to the
end of data), so that both measure the very same interval and a stall on a busy machine lands in
both.

``--seconds S``: run until killed or for S seconds (the data never runs out), printing
``READY`` once the warm-up steps are done; for tests that attach to a running loop.
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
        nn.Linear(FEATURES, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 4),
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("input", "compute", "optimizer"), default="input")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seconds", type=float, default=0.0)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    forever = a.seconds > 0
    deadline = time.perf_counter() + a.seconds
    n = 10**9 if forever else a.warmup + a.steps
    model = model_for("input" if a.mode == "input" else "compute")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()

    def warmed_up() -> bool:
        """Called once per step after the warm-up; False once a --seconds run is over."""
        return not forever or time.perf_counter() < deadline

    waits = 0.0
    start = 0.0
    steps = 0
    if a.mode == "optimizer":
        x = torch.randn(a.batch, FEATURES)
        y = torch.randint(0, 4, (a.batch,))
        for i in range(n):
            if i == a.warmup:
                start = time.perf_counter()
                if forever:
                    print("READY", flush=True)
            if i >= a.warmup and not warmed_up():
                break
            train(x, y)
            steps += int(i >= a.warmup)
        total = time.perf_counter() - start
        print(f"SELF_STEP_MS={total / steps * 1e3:.3f}")
    else:
        work = 8_000 if a.mode == "input" else 50
        loader = DataLoader(
            Samples(n * a.batch, work), batch_size=a.batch, shuffle=False, num_workers=a.workers
        )
        it = iter(loader)
        for i in range(n):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            if i == a.warmup:
                start = t1  # the agent's step WARMUP starts when this batch arrives
                if forever:
                    print("READY", flush=True)
            elif i > a.warmup:
                waits += t1 - t0
                steps += 1
            if i >= a.warmup and not warmed_up():
                break
            train(x, y)
        if forever:
            total = time.perf_counter() - start
        else:
            t0 = time.perf_counter()
            for _ in it:  # end of data: closes the agent's last step
                pass
            end = time.perf_counter()
            waits += end - t0
            steps += 1
            total = end - start
        if a.workers:
            print(f"WORKLOAD_PID={os.getpid()}")
    print(f"SELF_STEPS_PER_S={steps / total:.3f}")
    print(f"SELF_INPUT_FRACTION={waits / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
