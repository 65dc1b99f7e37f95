"""Loops that give the model-call clock nothing clean to time, for the bad-input tests.

``--case threads``: four threads call one model at the same time (a thread-pool server).
``--case recursion``: a tree-recursive model: each call recurses through ``--depth`` nested
module calls (deep enough that a frame more per call would raise ``RecursionError``).
``--case worker``: the model runs inside the DataLoader's ``__getitem__``, in spawned worker
processes (feature extraction); the loop only consumes the features.
``--case nomodel``: a NumPy loop with torch imported, no model at all.
``--case generator-predict``: Keras ``model.predict`` over a Python generator of batches.

Each prints ``LOOP_STARTED``, runs ``--seconds`` and prints ``RESULT=<checksum>`` (the same
with or without sofa-top: nothing it does changes a result) and ``JOB DONE``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np


def _torch_model() -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8)).eval()


def threads(seconds: float) -> float:
    import torch

    model = _torch_model()
    end = time.monotonic() + seconds
    sums = [0.0] * 4

    def serve(k: int) -> None:
        x = torch.ones(4, 64) * (k + 1)
        while time.monotonic() < end:
            with torch.no_grad():
                sums[k] = float(model(x).sum())

    pool = [threading.Thread(target=serve, args=(k,), name=f"server-{k}") for k in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(sums)


def recursion(seconds: float, depth: int) -> float:
    import torch
    from torch import nn

    class Tree(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.leaf = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor, level: int) -> torch.Tensor:
            if level == 0:
                return self.leaf(x)
            return self(x, level - 1) * 0.5 + 0.5 * x

    torch.manual_seed(0)
    model = Tree()
    x = torch.ones(2, 16)
    out = 0.0
    end = time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < end:
            x2 = x + float(np.sin(out))  # a little work in the loop body
            out = float(model(x2, depth).sum())
        return float(model(x, depth).sum())  # the same whatever the loop's length


class Features:
    """A Dataset whose items are a model's outputs (defined at module level: spawn pickles it)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.model: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        import torch

        if self.model is None:
            self.model = _torch_model()
        with torch.no_grad():
            return self.model(torch.full((1, 64), float(i % 7)))[0]


def worker(seconds: float) -> float:
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(
        Features(10**6), batch_size=16, num_workers=2, multiprocessing_context="spawn"
    )
    total = 0.0
    end = float("inf")
    for batch in loader:
        end = min(end, time.monotonic() + seconds)  # from the first batch (spawn is slow)
        total += float(batch.sum())  # the loop consumes features; no model of its own
        time.sleep(0.005)
        if time.monotonic() > end:
            break
    del torch
    return total


def nomodel(seconds: float) -> float:
    import torch  # noqa: F401  (imported, never used for a model)

    rng = np.random.default_rng(0)
    total = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = rng.normal(size=(200, 200))
        total += float((a @ a.T).trace())
    return total


def generator_predict(seconds: float) -> float:
    import keras

    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(16), keras.layers.Dense(4)])

    def batches() -> Iterator[np.ndarray]:
        end = time.monotonic() + seconds
        k = 0
        while time.monotonic() < end:
            k += 1
            yield (np.full((8, 32), float(k % 5), np.float32),)

    out = model.predict(batches(), verbose=0)
    return float(np.round(out.sum(), 3))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--depth", type=int, default=0)
    a = p.parse_args()
    print("LOOP_STARTED", flush=True)
    if a.case == "threads":
        result = threads(a.seconds)
    elif a.case == "recursion":
        # each level is one module call, 4 frames of Python here (torch 2.13, 3.11): a frame
        # more per level would exceed the recursion limit
        depth = a.depth or (sys.getrecursionlimit() - 60) // 4
        result = recursion(a.seconds, depth)
    elif a.case == "worker":
        result = worker(a.seconds)
    elif a.case == "nomodel":
        result = nomodel(a.seconds)
    elif a.case == "generator-predict":
        result = generator_predict(a.seconds)
    else:
        raise SystemExit(f"unknown case {a.case}")
    print(f"RESULT={result:.6g}")
    print("JOB DONE", flush=True)


if __name__ == "__main__":
    main()
