"""A TensorFlow training loop with no Keras model and no tf.data: each step's batch is made in
the loop body (NumPy: a per-sample FFT and matmuls, a CPU-bound decode), then one
``tf.function`` runs the forward, the gradient and the update of a small MLP held in
``tf.Variable``s (the ``tf-function-call`` step clock's shape).

``--seconds S`` (default 8) of steps after ``--warmup`` steps (default 3, the tracing among
them; 0: every step is measured). It measures its own truth with ``perf_counter``: the time
making the batch against the loop's time, over the steps after the warm-up, and prints
``READY`` after the warm-up and, at the end, ``PREP_FRACTION=`` and ``STEPS=``. Nothing here
knows about sofa-top.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

BATCH, FEATURES, HIDDEN = 16, 128, 64


def make_batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A batch 'decoded' on the host: a few ms of NumPy per sample."""
    rows = []
    for _ in range(BATCH):
        m = rng.standard_normal((FEATURES, FEATURES)).astype(np.float32)
        for _ in range(3):
            m = np.tanh(m @ m / FEATURES)
        rows.append(np.abs(np.fft.rfft(m[0], n=2 * FEATURES - 2)).astype(np.float32))
    x = np.stack(rows)
    return x, (x.sum(axis=1, keepdims=True) > x.mean() * FEATURES).astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    w1 = tf.Variable(tf.random.normal((FEATURES, HIDDEN), stddev=0.1, seed=1))
    w2 = tf.Variable(tf.random.normal((HIDDEN, 1), stddev=0.1, seed=2))

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits))
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.01 * g1)
        w2.assign_sub(0.01 * g2)
        return loss

    prep = total = 0.0
    steps = seen = 0
    until = time.monotonic() + a.seconds if a.warmup == 0 else float("inf")
    while time.monotonic() < until:
        t0 = time.perf_counter()
        x, y = make_batch(rng)
        t1 = time.perf_counter()
        float(train_step(x, y))
        t2 = time.perf_counter()
        seen += 1
        if seen == a.warmup:
            print("READY", flush=True)
            until = time.monotonic() + a.seconds
        if seen > a.warmup:
            prep, total, steps = prep + (t1 - t0), total + (t2 - t0), steps + 1
    print(f"STEPS={steps}")
    print(f"PREP_FRACTION={prep / total:.4f}", flush=True)


if __name__ == "__main__":
    main()
