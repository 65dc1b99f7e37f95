"""PyTorch training loops of the shapes that are not "one DataLoader feeding one optimizer".

``--shape``:

* ``forward-forward``: one optimizer per layer, each ``step()``-ed every iteration (layer-local
  losses, as in Hinton's forward-forward); the batches come from a DataLoader iterated once up
  front into a list.
* ``layerwise``: forward-forward as pytorch/examples writes it: the whole set in one batch
  (``next(iter(loader))``), then each layer trained to the end before the next one starts.
* ``upfront``: every batch pulled out of a DataLoader into a list, then epochs over the list.
* ``hand-sgd``: no ``torch.optim`` at all: ``p.data.add_(p.grad, alpha=-lr)`` after
  ``loss.backward()``.
* ``lbfgs``: ``torch.optim.LBFGS``, one ``step(closure)`` per iteration (the closure runs
  forward and backward up to ``max_iter`` times); ``--lbfgs-iter`` makes a step long.
* ``compile``: a ``torch.compile``d model fed from tensors in memory.
* ``generator``: a Python generator makes each batch (a little pure-Python work).
* ``mm``: the model is plain functions calling ``torch.mm`` on weight tensors (no nn.Module):
  nearly all the time is torch math called from the user's ``forward``.

Each runs for ``--seconds`` (at least ``--min-iterations``), prints ``LOOP_STARTED`` when the
loop begins and, at the end, ``ITERATIONS=<n>`` (training-loop iterations) and
``OPTIMIZER_STEPS=<n>`` (every ``step()`` of every optimizer).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 64


class Counter:
    iterations = 0
    optimizer_steps = 0


def data(n: int = 2048) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, FEATURES, generator=g)
    y = (x.sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def mlp(width: int = 256) -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, 2),
    )  # fmt: skip


def until(seconds: float, minimum: int) -> Callable[[], bool]:
    end = time.perf_counter() + seconds

    def more() -> bool:
        return Counter.iterations < minimum or time.perf_counter() < end

    return more


def forward_forward(more: Callable[[], bool], layerwise: bool) -> None:
    layers = [nn.Linear(FEATURES, 128), nn.Linear(128, 128), nn.Linear(128, 128)]
    opts = [torch.optim.Adam(layer.parameters(), lr=0.01) for layer in layers]

    def layer_loss(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(layer(x))
        goodness = h.pow(2).mean(dim=1)
        return torch.log1p(torch.exp(-goodness + 2.0)).mean(), h.detach()

    loader = DataLoader(data(), batch_size=2048 if layerwise else 64, shuffle=True)
    if layerwise:
        x, _ = next(iter(loader))  # the whole set, once
        h = x
        for layer, opt in zip(layers, opts, strict=True):
            # each layer to the end before the next one starts
            stop = Counter.iterations + 60
            while Counter.iterations < stop or (layer is layers[-1] and more()):
                loss, _ = layer_loss(layer, h)
                opt.zero_grad()
                loss.backward()
                opt.step()
                Counter.optimizer_steps += 1
                Counter.iterations += 1
            h = torch.relu(layer(h)).detach()
        return
    batches = list(loader)
    while more():
        for x, _ in batches:
            h = x
            for layer, opt in zip(layers, opts, strict=True):
                loss, h = layer_loss(layer, h)
                opt.zero_grad()
                loss.backward()
                opt.step()
                Counter.optimizer_steps += 1
            Counter.iterations += 1
            if not more():
                return


def upfront(more: Callable[[], bool]) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = list(DataLoader(data(), batch_size=32, shuffle=True))
    while more():
        for x, y in batches:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            Counter.optimizer_steps += 1
            Counter.iterations += 1
            if not more():
                return


def hand_sgd(more: Callable[[], bool]) -> None:
    model = mlp()
    ds = data()
    x_all, y_all = ds.tensors
    i = 0
    while more():
        x, y = x_all[i : i + 32], y_all[i : i + 32]
        i = (i + 32) % (len(ds) - 32)
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.01)
        Counter.iterations += 1


def lbfgs(more: Callable[[], bool], max_iter: int) -> None:
    model = mlp(128)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=max_iter)
    x, y = data(512).tensors

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    while more():
        opt.step(closure)
        Counter.optimizer_steps += 1
        Counter.iterations += 1


def compiled(more: Callable[[], bool]) -> None:
    model = torch.compile(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x_all, y_all = data().tensors
    i = 0
    while more():
        x, y = x_all[i : i + 64], y_all[i : i + 64]
        i = (i + 64) % (len(x_all) - 64)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        Counter.optimizer_steps += 1
        Counter.iterations += 1


def batches_from_a_generator() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    while True:
        rows = [[(i * j) % 7 / 7.0 for j in range(FEATURES)] for i in range(32)]  # a little work
        x = torch.tensor(rows) + torch.randn(32, FEATURES, generator=g)
        yield x, (x.sum(dim=1) > 0).long()


def generator(more: Callable[[], bool]) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches_from_a_generator():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        Counter.optimizer_steps += 1
        Counter.iterations += 1
        if not more():
            return


def mm(more: Callable[[], bool]) -> None:
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(512, 1024, generator=g) * 0.03).requires_grad_()
    w2 = (torch.randn(1024, 1024, generator=g) * 0.03).requires_grad_()
    w3 = (torch.randn(1024, 2, generator=g) * 0.03).requires_grad_()
    x = torch.randn(256, 512, generator=g)
    y = (x.sum(dim=1) > 0).long()

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.mm(inputs, w1))
        h = torch.relu(torch.mm(h, w2))
        return torch.mm(h, w3)

    while more():
        loss = nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        with torch.no_grad():
            for w in (w1, w2, w3):
                w -= 0.01 * w.grad  # type: ignore[operator]
                w.grad = None
        Counter.iterations += 1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--shape",
        required=True,
        choices=(
            "forward-forward", "layerwise", "upfront", "hand-sgd", "lbfgs", "compile",
            "generator", "mm",
        ),
    )  # fmt: skip
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--min-iterations", type=int, default=20)
    p.add_argument("--lbfgs-iter", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    a = p.parse_args()
    torch.manual_seed(0)
    if a.threads:
        torch.set_num_threads(a.threads)
    print("LOOP_STARTED", flush=True)
    more = until(a.seconds, a.min_iterations)
    shape = a.shape
    if shape in ("forward-forward", "layerwise"):
        forward_forward(more, layerwise=shape == "layerwise")
    elif shape == "upfront":
        upfront(more)
    elif shape == "hand-sgd":
        hand_sgd(more)
    elif shape == "lbfgs":
        lbfgs(more, a.lbfgs_iter)
    elif shape == "compile":
        compiled(more)
    elif shape == "generator":
        generator(more)
    else:
        mm(more)
    print(f"ITERATIONS={Counter.iterations}")
    print(f"OPTIMIZER_STEPS={Counter.optimizer_steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
