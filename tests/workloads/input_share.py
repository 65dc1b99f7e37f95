"""A compute-heavy PyTorch training loop whose input takes a chosen share of each step.

Usage: ``python input_share.py --input-ms MS [--width W] [--seconds S]``.
``DataLoader(num_workers=0)`` feeds an MLP (one intra-op thread, ``--width`` wide, 4 layers,
batch 64) trained with ``optimizer.step()``; each batch's ``__getitem__`` calls burn ``MS``
milliseconds of the loading thread's CPU time in total (``time.thread_time``, so the work is the
same however busy the machine is: a decode or a tokenizer). Where no worker loads, that work is
the loop's input wait; DataLoader workers (``compare``'s ``prefetch``) move it beside the model.

The truth: the loop times its own fetches and steps and prints ``TRUTH {json}`` at the end
(``input_fraction``: fetch time over loop time, ``steps``, ``elapsed_s``), and ``step N`` every
20 steps.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH = 64
DEPTH = 4


class Burn(Dataset[tuple[torch.Tensor, int]]):
    """Samples costing ``ms_per_sample`` of CPU each."""

    def __init__(self, ms_per_sample: float, width: int) -> None:
        self.s, self.width = ms_per_sample / 1000.0, width

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        end = time.thread_time() + self.s
        while time.thread_time() < end:
            pass
        return torch.full((self.width,), (index % 7) / 7.0), index % 4


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input-ms", type=float, required=True, help="CPU ms per batch of input")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (the lever, by hand)")
    a = p.parse_args()
    torch.set_num_threads(1)  # one core for the model: the other is the input's to take
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(DEPTH - 1):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(a.width, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Burn(a.input_ms / BATCH, a.width), batch_size=BATCH, num_workers=a.workers)
    waited, steps = 0.0, 0
    start = end = time.monotonic()
    stop = start + a.seconds
    it = iter(loader)
    while end < stop:
        t0 = time.monotonic()
        x, y = next(it)
        waited += time.monotonic() - t0
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        end = time.monotonic()
        if steps % 20 == 0:
            print(f"step {steps} loss={loss.item():.4f}", flush=True)
        steps += 1
    elapsed = end - start
    truth = {"input_fraction": round(waited / elapsed, 4), "steps": steps, "elapsed_s": elapsed}
    print("TRUTH " + json.dumps(truth), flush=True)


if __name__ == "__main__":
    main()
