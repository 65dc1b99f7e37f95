"""Input streams that repeat with a short period, fed by storage that waits (latency-bound).

Usage: ``python periodic_streams.py --framework tf|torch [--items N] [--item-ms MS]
[--seconds S]``. Each item waits ``--item-ms`` (a read from slow storage: no CPU) and is
``(i % 7) / 7``, synthetic data that repeats; batches of 8 train a tiny model; ``step N
loss=X`` every 20 steps.

``tf``: ``Dataset.range(items).map(read).repeat().batch(8)``: a small dataset under
``.repeat()``, endless, whose batches repeat every ``items / 8`` (a faster run sees the period
many more times than a slow one in the same time). ``torch``: an ``IterableDataset`` without
``__len__`` of ``items`` items (a short epoch), sharded per DataLoader worker by
``get_worker_info()``; the loop runs epoch after epoch.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 8
FEATURES = 16


def run_tf(items: int, item_s: float, seconds: float) -> None:
    import numpy as np
    import tensorflow as tf

    def read(i: np.int64) -> np.ndarray:
        time.sleep(item_s)
        return np.full((FEATURES,), (int(i) % 7) / 7.0, dtype=np.float32)

    def load(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.numpy_function(read, [i], tf.float32, stateful=False)
        x.set_shape((FEATURES,))
        return x, tf.cast(i % 4, tf.int32)

    options = tf.data.Options()
    options.autotune.enabled = False  # serial, as written: the agent's prefetch parallelizes it
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    ds = tf.data.Dataset.range(items).map(load).repeat().batch(BATCH).with_options(options)
    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(4)])
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    end = time.monotonic() + seconds
    for n, (x, y) in enumerate(ds):
        loss = step(x, y)
        if n % 20 == 0:
            print(f"step {n} loss={float(loss):.4f}", flush=True)
        if time.monotonic() >= end:
            break


def run_torch(items: int, item_s: float, seconds: float) -> None:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class Stream(IterableDataset[tuple[Any, int]]):
        def __iter__(self) -> Iterator[tuple[Any, int]]:
            info = get_worker_info()
            mine = range(items) if info is None else range(info.id, items, info.num_workers)
            for i in mine:
                time.sleep(item_s)
                yield torch.full((FEATURES,), (i % 7) / 7.0), i % 4

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Linear(FEATURES, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Stream(), batch_size=BATCH, num_workers=0)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if n % 20 == 0:
                print(f"step {n} loss={loss.item():.4f}", flush=True)
            n += 1
            if time.monotonic() >= end:
                break


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", choices=("tf", "torch"), required=True)
    p.add_argument("--items", type=int, default=256)
    p.add_argument("--item-ms", type=float, default=4.0)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    run = run_tf if a.framework == "tf" else run_torch
    run(a.items, a.item_ms / 1e3, a.seconds)


if __name__ == "__main__":
    main()
