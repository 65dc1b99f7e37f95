"""Keras ``fit`` on a ``keras.utils.PyDataset`` whose ``__getitem__`` waits ``--item-ms`` per
batch (a read), the keras-io shape. ``--workers N`` is the PyDataset's own ``workers=``; with 1
(the default) Keras reads the batches one at a time. Runs epochs of ``--batches`` batches for
``--seconds``; prints ``READY`` after the first batch.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import time

import keras
import numpy as np

FEATURES = 16


class Batches(keras.utils.PyDataset):  # type: ignore[misc]
    def __init__(self, batches: int, item_s: float, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.batches = batches
        self.item_s = item_s

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(self.item_s)
        x = np.full((8, FEATURES), i % 7, np.float32)
        return x, np.full((8,), i % 4, np.int32)


class Ready(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, end: float) -> None:
        super().__init__()
        self.end = end
        self.said = False

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if not self.said:
            print("READY", flush=True)
            self.said = True
        if time.monotonic() >= self.end:
            self.model.stop_training = True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--item-ms", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = Batches(a.batches, a.item_ms / 1000.0, workers=a.workers)
    model.fit(data, epochs=10**6, verbose=0, callbacks=[Ready(time.monotonic() + a.seconds)])
    return 0


if __name__ == "__main__":
    code = main()
    # TensorFlow 2.21 hangs in interpreter shutdown after a fit on a PyDataset (the
    # from_generator thread; seen without sofa-top too): run the exit handlers (the agent's
    # final flush among them), then leave
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(code)
