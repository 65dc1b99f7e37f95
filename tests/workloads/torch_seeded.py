"""A seeded, deterministic PyTorch loop (DataLoader, SGD, backward) of fixed length, for the
differential tests: two runs print the same ``epoch N loss X`` lines, with or without sofa-top.

Usage: ``python torch_seeded.py [--epochs N] [--workers N]``.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    x = torch.randn(512, 32)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(
        TensorDataset(x, y),
        batch_size=32,
        shuffle=True,
        num_workers=a.workers,
        generator=torch.Generator().manual_seed(0),
    )
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(a.epochs):
        total = 0.0
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(loader):.6f}", flush=True)


if __name__ == "__main__":
    main()
