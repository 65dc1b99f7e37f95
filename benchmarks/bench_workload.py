"""Fixed-work workloads for the overhead benchmarks: warm up (the profiler attaches meanwhile),
then time a fixed amount of work and print ``CPU <process CPU seconds>`` and
``ELAPSED <seconds>``.

Usage: ``python bench_workload.py python|torch|torch150 [--warmup S] [--work N]``
"""

from __future__ import annotations

import argparse
import threading
import time


def spin_here(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def python_work(units: int) -> None:
    for _ in range(units):
        spin_here(100_000)


def torch_work(units: int) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 16, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(units):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("python", "torch", "torch150"))
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--work", type=int, default=0, help="work units (default: per kind)")
    args = ap.parse_args()
    if args.kind == "torch150":
        # A torch process with 150 threads: idle Python threads, as data/logging helpers leave.
        stop = threading.Event()
        for i in range(148):
            threading.Thread(target=stop.wait, name=f"idle-{i}", daemon=True).start()
    work = python_work if args.kind == "python" else torch_work
    units = args.work or (500 if args.kind == "python" else 400)
    if args.kind != "python":
        import torch

        torch.set_num_threads(1)
    deadline = time.monotonic() + args.warmup
    while time.monotonic() < deadline:
        work(1)
    t0, c0 = time.perf_counter(), time.process_time()
    work(units)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    # CPU: the whole process's (any profiler thread in it included); on a shared machine it
    # moves far less than the wall time does
    print(f"CPU {cpu:.4f}", flush=True)
    print(f"ELAPSED {elapsed:.4f}", flush=True)


if __name__ == "__main__":
    main()
