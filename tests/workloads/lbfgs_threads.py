"""An LBFGS fit of a small MLP on fixed data (the pytorch/examples time-sequence shape): every
``optimizer.step(closure)`` runs a few forward/backward passes of small matrices, so each op is
short and OpenMP's threads meet at a barrier thousands of times a second.

``--threads N``: ``torch.set_num_threads(N)`` (default: leave torch's own pool). ``--hidden H``
(default 64) sizes the model and the batch: at 1024 each op is a long parallel region that
keeps every thread of the pool runnable. With more
threads than the cores the workload gets, spin-waiting threads wait for each other at every
barrier (cpu-oversubscribed); with 1 it is plainly compute-bound. Runs for ``--seconds``;
prints ``READY`` after the first step and ``STEPS <n> <seconds>`` at the end.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    h = a.hidden
    x, y = torch.randn(4 * h, h), torch.randn(4 * h, 1)
    model = nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    start = time.monotonic()
    end = start + a.seconds
    steps = 0
    while time.monotonic() < end:
        opt.step(closure)  # type: ignore[no-untyped-call]
        steps += 1
        if steps == 1:
            print("READY", flush=True)
    print(f"STEPS {steps} {time.monotonic() - start:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
