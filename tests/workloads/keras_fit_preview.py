"""A Keras CNN ``fit`` over tf.data after the previews a tutorial makes first: ``take(1)``,
``next(iter(ds))`` and a ``for`` that breaks after a few batches (each one looks at its batch
for ``--look-ms``, as a plot or a print does). Prints its own truth as one JSON line:
``{"truth": {"preview_fetches", "fit_steps"}}`` (the fit's batches: the training loop's steps).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SIDE = 16


def _look(batch: object, look_s: float) -> None:
    """What a preview does with its batch: inspect it (a plot, a print of its stats)."""
    x = np.asarray(batch[0])  # type: ignore[index]
    end = time.perf_counter() + look_s
    while time.perf_counter() < end:
        x.mean(), x.std()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--look-ms", type=float, default=200.0)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random((16 * a.batches, SIDE, SIDE, 3), np.float32)
    y = rng.integers(0, 4, 16 * a.batches).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    look = a.look_ms / 1000.0
    fetches = 0
    for batch in ds.take(1):  # the preview a tutorial makes first
        _look(batch, look)
        fetches += 1
    _look(next(iter(ds)), look)
    fetches += 1
    for i, batch in enumerate(ds):
        _look(batch, look)
        fetches += 1
        if i == 2:
            break
    model = tf.keras.Sequential(
        [
            tf.keras.Input((SIDE, SIDE, 3)),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(4),
        ]
    )
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=a.epochs, verbose=0)
    truth = {"preview_fetches": fetches, "fit_steps": a.batches * a.epochs}
    print(json.dumps({"truth": truth}), flush=True)


if __name__ == "__main__":
    main()
