"""An input-bound PyTorch training loop in one of two shapes of input bottleneck.

Usage: ``python input_shapes_torch.py --shape cpu|latency [--seconds S]`` (default 60 s, or
until killed). ``DataLoader(num_workers=0)`` feeds a small model trained with
``optimizer.step()``; it prints ``step N loss=X`` every 20 steps.

``--shape cpu``: each ``__getitem__`` costs CPU tensor ops (an FFT and 32 matmuls of 96x96,
intra-op threads kept at 1 so one worker is about one core) -- about 8 ms per batch on a
2-core VM: well above what handing a batch over from a worker costs. ``--shape latency``: each
``__getitem__`` waits 4 ms (``time.sleep``, as a slow storage or network read would) and costs
almost no CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH = 8
FEATURES = 64
LATENCY_S = 0.004
MATMULS = 32


class Samples(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, shape: str) -> None:
        self.shape = shape

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.shape == "latency":
            time.sleep(LATENCY_S)  # a storage / network read: waits, uses no CPU
            return torch.full((FEATURES,), (index % 7) / 7.0), index % 4
        torch.set_num_threads(1)  # one loader ~ one core (workers start with the default)
        g = torch.Generator().manual_seed(index)
        x = torch.randn(96, 96, generator=g)
        m = torch.fft.fft2(torch.complex(x, x)).real / 96.0
        for _ in range(MATMULS):
            m = (m @ x) / 96.0
        return m[0, :FEATURES].clone(), index % 4


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("cpu", "latency"), required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    # One intra-op thread: the model is tiny, and on a loaded machine OpenMP's barrier waits for
    # a descheduled sibling thread (~70 ms steps seen on 2 busy cores).
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Samples(a.shape), batch_size=BATCH, shuffle=False, num_workers=0)
    end = time.monotonic() + a.seconds
    for step, (x, y) in enumerate(loader):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss={loss.item():.4f}", flush=True)
        if time.monotonic() >= end:
            break


if __name__ == "__main__":
    main()
