"""Demo: a tf.data pipeline that reads each image from (simulated) network storage and decodes
it in a serial map (no parallelism, no prefetch), feeding a small CNN in an eager loop:
input-bound by construction. Runs until --seconds elapse.

``--storage-ms`` is the per-file read latency (a ``time.sleep``, the shape of a network file
system or a blob store: it waits, it burns no CPU); ``--decode-iters`` the CPU cost of decoding
and augmenting one image. ``--storage-ms 0 --decode-iters 40`` gives a purely CPU-bound input
stage instead."""

from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

STORAGE_MS = 4.0
DECODE_ITERS = 4


def heavy_decode(i: tf.Tensor, iters: int = 40) -> tuple[tf.Tensor, tf.Tensor]:
    img = tf.random.stateless_uniform((32, 32, 3), seed=tf.stack([i, i]))
    for _ in range(iters):  # a stand-in for JPEG decoding and augmentation
        spec = tf.signal.rfft2d(tf.transpose(img, (2, 0, 1)))
        img = tf.transpose(tf.signal.irfft2d(spec * 0.99, fft_length=(32, 32)), (1, 2, 0))
        img = (img - tf.reduce_mean(img)) / (tf.math.reduce_std(img) + 1e-6)
    return img, i % 10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=math.inf)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--storage-ms", type=float, default=STORAGE_MS)
    ap.add_argument("--decode-iters", type=int, default=DECODE_ITERS)
    args = ap.parse_args()
    latency = args.storage_ms / 1e3

    def read_file(i: np.int64) -> np.int64:
        time.sleep(latency)  # waiting on storage: no CPU used
        return i

    def load(i: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if latency > 0:
            i = tf.numpy_function(read_file, [i], tf.int64, stateful=False)
            i.set_shape(())
        return heavy_decode(tf.cast(i, tf.int32), args.decode_iters)

    ds = tf.data.Dataset.range(10**9).map(load).batch(args.batch_size)
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input((32, 32, 3)),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(10),
        ]
    )
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(
            zip(
                tape.gradient(loss, model.trainable_variables),
                model.trainable_variables,
                strict=True,
            )
        )
        return loss

    t_end = time.monotonic() + args.seconds
    wait = total = 0.0
    it = iter(ds)
    step = 0
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        loss = train_step(x, y)
        t2 = time.perf_counter()
        wait, total, step = wait + (t1 - t0), total + (t2 - t0), step + 1
        if step % 20 == 0:
            print(
                f"step {step} loss {float(loss):.3f} input fraction {wait / total:.2f}", flush=True
            )


if __name__ == "__main__":
    main()
