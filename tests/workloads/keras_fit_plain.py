"""A plain Keras ``fit`` (no py_function in the step, so XLA can compile it) for optimizer tests.

Usage: ``python keras_fit_plain.py [--epochs N]``. Prints ``JIT_COMPILE=<model.jit_compile>``
after ``compile`` (Keras resolves ``"auto"`` to False on a CPU-only machine) and ``epoch N loss X``
after each epoch.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 32)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((32,)),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    print(f"JIT_COMPILE={model.jit_compile}", flush=True)

    class Report(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            print(f"epoch {epoch} loss {float((logs or {})['loss']):.4f}", flush=True)

    model.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Report()])


if __name__ == "__main__":
    main()
