"""Torch training loops over models of three shapes, for the advice that depends on the model:
``--model lstm`` (an LSTM language model: no chain of memory-bound layers), ``--model cnn``
(Conv -> BatchNorm -> ReLU -> MaxPool: one chain depth-first can take), ``--model mlp``
(Linear/ReLU only). Data is one preloaded batch (compute-bound), one intra-op thread. Runs for
``--seconds``; prints ``READY`` after the first step.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class LSTMLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(500, 64)
        self.lstm = nn.LSTM(64, 128, num_layers=2)
        self.out = nn.Linear(128, 500)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.out(hidden)  # type: ignore[no-any-return]


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(16 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.head(x.flatten(1))  # type: ignore[no-any-return]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("lstm", "cnn", "mlp"), default="lstm")
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model: nn.Module
    if a.model == "lstm":
        model = LSTMLM()
        x = torch.randint(0, 500, (35, 16))
        y = torch.randint(0, 500, (35 * 16,))
    elif a.model == "cnn":
        model = CNN()
        x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    else:
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + a.seconds
    steps = 0
    while time.monotonic() < end:
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        steps += 1
        if steps == 1:
            print("READY", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
