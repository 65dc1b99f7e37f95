"""The shape of keras-io's 3D image classification example: Keras ``fit`` over a tf.data map
through ``tf.numpy_function``, whose output has no static shape.

Keras 3 traces its train function on the iterator's ``get_next()``: the batch reaches the model
with an unknown shape, and building the first layer fails with ``ValueError: as_list() is not
defined on an unknown TensorShape`` (as the example does on Keras 3.15). ``--static`` gives the
map's output its shape (``set_shape``), the usual fix: then it trains and prints ``epoch N loss
X`` after each epoch. Seeded and deterministic, so that two runs print the same losses.

``--late-determinism``: op determinism comes on only after a first ``fit`` (then it fits again):
a train function traced before may hold ops that determinism refuses to run.

Usage: ``python keras_unknown_shape.py [--static] [--epochs N] [--steps-per-execution N]
[--late-determinism]``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SIDE, DEPTH = 16, 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--static", action="store_true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-execution", type=int, default=1)
    p.add_argument("--late-determinism", action="store_true")
    a = p.parse_args()
    tf.keras.utils.set_random_seed(0)
    if not a.late_determinism:
        tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(0)
    volumes = rng.random((32, SIDE, SIDE, DEPTH), dtype=np.float32)
    labels = (volumes.mean(axis=(1, 2, 3)) > 0.5).astype(np.float32)

    def rotate(volume: np.ndarray) -> np.ndarray:
        return np.rot90(volume, k=1, axes=(0, 1)).astype(np.float32)

    def preprocess(volume: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        volume = tf.numpy_function(rotate, [volume], tf.float32)
        if a.static:
            volume.set_shape((SIDE, SIDE, DEPTH))
        return tf.expand_dims(volume, axis=3), label

    ds = tf.data.Dataset.from_tensor_slices((volumes, labels)).shuffle(32, seed=0)
    ds = ds.map(preprocess).batch(4).prefetch(2)
    inputs = tf.keras.Input((SIDE, SIDE, DEPTH, 1))
    h = tf.keras.layers.Conv3D(4, 3, activation="relu")(inputs)
    h = tf.keras.layers.GlobalAveragePooling3D()(h)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(h))
    model.compile(
        loss="binary_crossentropy", optimizer="adam", steps_per_execution=a.steps_per_execution
    )

    class Report(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
            print(f"epoch {epoch} loss {float((logs or {})['loss']):.6f}", flush=True)

    model.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Report()])
    if a.late_determinism:
        tf.config.experimental.enable_op_determinism()
        model.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Report()])


if __name__ == "__main__":
    main()
