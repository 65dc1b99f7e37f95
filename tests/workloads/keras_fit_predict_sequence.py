"""Keras ``fit`` on a few batches, then ``predict`` over a ``keras.utils.Sequence`` whose
``__getitem__`` decodes and augments each batch (numpy work of ``--item-ms`` or so): the
keras-io shape of an inference pass fed by Python. Prints its own truth as one JSON line:
``{"truth": {"batch_s", "batch_cached_s", "input_wait_fraction"}}``, the input share of the
predict pass by removal: its time per batch against the same predict's over batches decoded
beforehand.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time

import keras
import numpy as np

SIDE = 16


def _decode(i: int, batch: int, work_s: float) -> np.ndarray:
    """A batch as a decoder and augmenter would make it: numpy work until ``work_s`` passed."""
    rng = np.random.default_rng(i)
    end = time.perf_counter() + work_s
    x = rng.random((batch, SIDE, SIDE, 3), np.float32)
    while time.perf_counter() < end:  # decode, flip, jitter, normalize: real CPU work
        x = np.flip(x, axis=2) * np.float32(0.999) + np.float32(0.001)
        x = (x - x.mean()) / (x.std() + np.float32(1e-6))
    return x.astype(np.float32)


class Images(keras.utils.Sequence):  # type: ignore[misc]
    def __init__(self, batches: int, batch: int, work_s: float) -> None:
        super().__init__()
        self.batches, self.batch, self.work_s = batches, batch, work_s
        self.cached: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        x = self.cached[i] if self.cached is not None else _decode(i, self.batch, self.work_s)
        return x, np.full((self.batch,), i % 4, np.int32)


class Ends(keras.callbacks.Callback):  # type: ignore[misc]
    """When each predict batch ended (perf_counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_predict_batch_end(self, batch: int, logs: object = None) -> None:
        self.ends.append(time.perf_counter())


def _per_batch(model: keras.Model, data: Images) -> float:
    """The mean time per batch of ``model.predict(data)`` after its first two batches."""
    ends = Ends()
    model.predict(data, verbose=0, callbacks=[ends])
    t = ends.ends[2:]
    return (t[-1] - t[0]) / (len(t) - 1)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--item-ms", type=float, default=6.0)
    p.add_argument("--train-batches", type=int, default=10)
    p.add_argument("--batches", type=int, default=150)
    a = p.parse_args()
    model = keras.Sequential(
        [
            keras.Input((SIDE, SIDE, 3)),
            keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(Images(a.train_batches, 16, a.item_ms / 1000.0), epochs=2, verbose=0)
    print("READY", flush=True)
    work = _per_batch(model, Images(a.batches, 16, a.item_ms / 1000.0))
    # the truth by removal: the same predict over batches decoded beforehand (a fifth of them:
    # the time per batch in the steady state is what is compared, not the pass's start-up)
    n = max(8, a.batches // 5)
    cached = Images(n, 16, 0.0)
    cached.cached = [_decode(i, 16, a.item_ms / 1000.0) for i in range(n)]
    bare = _per_batch(model, cached)
    truth = {"batch_s": work, "batch_cached_s": bare, "input_wait_fraction": 1 - bare / work}
    print(json.dumps({"truth": truth}), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # TensorFlow hangs in interpreter shutdown after a Keras PyDataset pass (its
    # from_generator thread; see keras_pydataset.py): run the exit handlers, then leave
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(code)
