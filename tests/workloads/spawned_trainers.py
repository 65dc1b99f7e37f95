"""Trainers in spawned children: the parent (which never imports torch) starts ``--children``
processes with multiprocessing's ``spawn`` start method, each fitting a small MLP with LBFGS
(the ``lbfgs_threads.py`` shape) under torch's default intra-op pool, one thread per core.

N children of a pool the size of the machine put N times the cores' worth of spin-waiting
OpenMP threads on the cores: every parallel region's barrier waits for a descheduled thread
(the job's own oversubscription). ``--threads N``: each child calls
``torch.set_num_threads(N)`` (default: leave torch's own pool). Each child prints
``samples/s <rate>`` about once a second and ``STEPS <n> <seconds>`` at the end; the parent
prints ``READY`` once every child has stepped. Runs for ``--seconds``; on SIGTERM the parent
stops its children and waits for them, as a launcher does (so it is the last to exit).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import signal
import sys
import time
from typing import Any


def train(rank: int, threads: int, hidden: int, seconds: float, ready: Any) -> None:
    """One trainer: LBFGS steps over fixed data for ``seconds``."""
    import torch
    from torch import nn

    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(rank)
    h = hidden
    x, y = torch.randn(4 * h, h), torch.randn(4 * h, 1)
    model = nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    start = time.monotonic()
    end = start + seconds
    steps, mark, mark_steps = 0, start, 0
    while time.monotonic() < end:
        opt.step(closure)  # type: ignore[no-untyped-call]
        steps += 1
        if steps == 1:
            ready.release()
        now = time.monotonic()
        if now - mark >= 1.0:
            rate = (steps - mark_steps) * x.shape[0] / (now - mark)
            print(f"rank {rank} samples/s {rate:.1f}", flush=True)
            mark, mark_steps = now, steps
    print(f"rank {rank} STEPS {steps} {time.monotonic() - start:.2f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--children", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    procs = [
        ctx.Process(target=train, args=(r, a.threads, a.hidden, a.seconds, ready))
        for r in range(a.children)
    ]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.acquire()
        print("READY", flush=True)
        for proc in procs:
            proc.join()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join()
    return max((proc.exitcode or 0 for proc in procs), default=0)


if __name__ == "__main__":
    sys.exit(main())
