"""Target of ``inject.py``'s pause measurement: a loop of small fixed chunks of work that logs
when each chunk ended, so that any pause shows as a chunk that took longer than the others.

``python inject_target.py python|torch OUT --stop FILE``: prints READY, runs until FILE exists,
then writes the chunk end times (``time.monotonic``, the clock the benchmark uses) to OUT.
``torch`` imports torch and trains a small model through a DataLoader (so that the agent's
torch hooks install at attach and take effect at the next ``next()``).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("python", "torch"))
    ap.add_argument("out")
    ap.add_argument("--stop", required=True)
    a = ap.parse_args()
    ends: list[float] = []
    if a.kind == "torch":
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        torch.set_num_threads(1)
        data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,)))
        model = torch.nn.Linear(32, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def batches() -> object:
            while True:
                yield from DataLoader(data, batch_size=16)

        it = iter(batches())

        def chunk() -> None:
            x, y = next(it)  # type: ignore[call-overload]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    else:

        def chunk() -> None:
            total = 0
            for i in range(3000):
                total += i * i % 7

    for _ in range(200):
        chunk()
    print("READY", flush=True)
    n = 0
    while True:
        chunk()
        ends.append(time.monotonic())
        n += 1
        if n % 50 == 0 and os.path.exists(a.stop):
            break
    with open(a.out, "w") as f:
        json.dump(ends, f)


if __name__ == "__main__":
    main()
