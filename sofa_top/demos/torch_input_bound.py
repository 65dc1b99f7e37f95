"""Demo: a small CNN fed by a DataLoader with num_workers=0 whose __getitem__ reads each image
from (simulated) network storage and decodes it.

The loop waits for input most of each step: the classic 'input-bound' shape. Runs until
--seconds elapse (default: forever) and prints its own input fraction every 50 steps.
``--storage-ms`` is the per-file read latency (a ``time.sleep``: it waits, it burns no CPU),
``--decode-iters`` the CPU cost of decoding one image; ``--storage-ms 0 --decode-iters 12`` gives
a purely CPU-bound input stage instead.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

STORAGE_MS = 4.0
DECODE_ITERS = 2


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Images 'read' from slow storage and made on the fly by a 'decode + augment' step."""

    def __init__(
        self, n: int = 100_000, size: int = 32, storage_ms: float = 0.0, decode_iters: int = 12
    ) -> None:
        self.n, self.size = n, size
        self.latency, self.iters = storage_ms / 1e3, decode_iters

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.latency > 0:
            time.sleep(self.latency)  # waiting on storage: no CPU used
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, self.size, self.size, generator=g)
        for _ in range(self.iters):  # a stand-in for JPEG decoding and augmentation
            img = torch.fft.irfft2(torch.fft.rfft2(img) * 0.99, s=(self.size, self.size))
            img = (img - img.mean()) / (img.std() + 1e-6)
        return img, i % 10


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=math.inf)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--storage-ms", type=float, default=STORAGE_MS)
    ap.add_argument("--decode-iters", type=int, default=DECODE_ITERS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    images = SyntheticImages(storage_ms=args.storage_ms, decode_iters=args.decode_iters)
    loader = DataLoader(images, batch_size=args.batch_size, num_workers=0, shuffle=True)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    t_end = time.monotonic() + args.seconds
    wait = total = 0.0
    step = 0
    while time.monotonic() < t_end:
        it = iter(loader)
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            t2 = time.perf_counter()
            wait, total, step = wait + (t1 - t0), total + (t2 - t0), step + 1
            if step % 50 == 0:
                print(
                    f"step {step} loss {loss.item():.3f} input fraction {wait / total:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
