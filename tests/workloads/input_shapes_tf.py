"""An input-bound eager TensorFlow training loop in one of two shapes of input bottleneck.

Usage: ``python input_shapes_tf.py --shape cpu|latency [--seconds S] [--autotune]`` (default
60 s, or until killed). The tf.data pipeline is serial (no parallel calls, no prefetch; autotune,
map_parallelization and inject_prefetch disabled) and feeds a small Keras model trained with a
``GradientTape`` step (a ``tf.function``) in an eager ``for batch in ds`` loop; it prints
``step N loss=X`` every 20 steps.

``--shape cpu``: each element costs pure TF compute (an FFT and matmuls) -- about 10 ms of CPU
per batch. ``--shape latency``: each element waits ~5 ms (``tf.numpy_function`` sleeping, as
a slow storage or network read would) and costs almost no CPU.

``--autotune``: the usual tuned pipeline instead of the serial one, ``map(num_parallel_calls=
AUTOTUNE)`` and a final ``prefetch(AUTOTUNE)`` (what the agent's ``parallelism`` overrides).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

BATCH = 8
FEATURES = 64
LATENCY_S = 0.005
MATMULS = 14


def cpu_element(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """About 1 ms of CPU in pure TF ops."""
    x = tf.random.stateless_normal((96, 96), seed=tf.stack([i, i]))
    m = tf.math.real(tf.signal.fft2d(tf.complex(x, x))) / 96.0
    for _ in range(MATMULS):
        m = tf.linalg.matmul(m, x) / 96.0
    return m[0, :FEATURES], tf.cast(i % 4, tf.int32)


def _slow_read(i: np.int64) -> np.ndarray:
    time.sleep(LATENCY_S)  # a storage / network read: waits, uses no CPU
    return np.full((FEATURES,), (int(i) % 7) / 7.0, dtype=np.float32)


def latency_element(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    # numpy_function, not py_function: it skips the eager-tensor round trip (~2 ms CPU each)
    x = tf.numpy_function(_slow_read, [i], tf.float32, stateful=False)
    x.set_shape((FEATURES,))
    return x, tf.cast(i % 4, tf.int32)


def dataset(shape: str, autotune: bool = False) -> tf.data.Dataset:
    fn = cpu_element if shape == "cpu" else latency_element
    if autotune:
        ds = tf.data.Dataset.range(10**9).map(fn, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    # keep the pipeline serial: tf.data would otherwise inject a prefetch and parallelize maps
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    return tf.data.Dataset.range(10**9).map(fn).batch(BATCH).with_options(options)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("cpu", "latency"), required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--autotune", action="store_true", help="AUTOTUNE map and final prefetch")
    a = p.parse_args()
    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(4)])
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function  # the step is compiled; the loop over the dataset stays eager
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    end = time.monotonic() + a.seconds
    for step, (x, y) in enumerate(dataset(a.shape, a.autotune)):
        loss = train_step(x, y)
        if step % 20 == 0:
            print(f"step {step} loss={float(loss):.4f}", flush=True)
        if time.monotonic() >= end:
            break


if __name__ == "__main__":
    main()
