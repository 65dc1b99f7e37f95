"""An eager TensorFlow loop over tf.data for agent tests; measures its own input fraction.

``--mode input``: a slow serial ``map`` (heavy tf ops per element, no prefetch) feeding a tiny
step -> input-bound. ``--mode compute``: a cheap prefetched pipeline feeding a heavier compiled
step -> compute-bound. ``--loop next`` pulls with ``next(it)``; ``--loop for`` uses ``for x in
ds`` and takes the gap between the end of one step's compute and the start of the next body as
that step's wait. The last line printed is ``SELF_INPUT_FRACTION=<sum of waits / loop time>``
over the steps after ``--warmup``; ``SELF_STEPS_PER_S`` is the throughput of those steps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

DIM = 160


def slow_map(i: tf.Tensor) -> tf.Tensor:
    m = tf.random.stateless_normal((DIM, DIM), seed=tf.stack([i, i]))
    for _ in range(6):
        m = tf.linalg.matmul(m, m) / float(DIM)
    return tf.reduce_sum(m, axis=0)


def cheap_map(i: tf.Tensor) -> tf.Tensor:
    return tf.fill((DIM,), tf.cast(i % 7, tf.float32) / 7.0)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("input", "compute"), default="input")
    p.add_argument("--loop", choices=("next", "for"), default="next")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    a = p.parse_args()
    n = a.warmup + a.steps

    if a.mode == "input":
        options = tf.data.Options()
        # a truly serial pipeline: tf.data would otherwise parallelize the map and prefetch
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False
        options.experimental_optimization.map_parallelization = False
        ds = tf.data.Dataset.range(n * a.batch).map(slow_map).batch(a.batch)
        ds = ds.with_options(options)
        layers, width = 1, DIM
    else:
        ds = tf.data.Dataset.range(n * a.batch).map(cheap_map).batch(a.batch).prefetch(2)
        layers, width = 6, 768
    w_in = tf.Variable(tf.random.normal((DIM, width)) * 0.01)
    ws = [tf.Variable(tf.random.normal((width, width)) * 0.01) for _ in range(layers)]

    @tf.function  # type: ignore[untyped-decorator]
    def step(x: tf.Tensor) -> tf.Tensor:
        h = tf.matmul(tf.tile(x, [32, 1]), w_in)
        for w in ws:
            h = tf.tanh(tf.matmul(h, w))
        loss = tf.reduce_mean(h)
        w_in.assign_sub(0.0 * w_in)
        return loss

    waits = 0.0
    start = 0.0
    if a.loop == "next":
        it = iter(ds)
        for i in range(n):
            if i == a.warmup:
                start = time.perf_counter()
            t0 = time.perf_counter()
            x = next(it)
            if i >= a.warmup:
                waits += time.perf_counter() - t0
            step(x).numpy()
        total = time.perf_counter() - start
        for _ in it:  # drain: the end of data closes the agent's last step
            pass
    else:
        end_prev = 0.0
        for i, x in enumerate(ds):
            now = time.perf_counter()
            if i == a.warmup:
                start = end_prev
            if i >= a.warmup:
                waits += now - end_prev
            step(x).numpy()
            end_prev = time.perf_counter()
        total = end_prev - start
    print(f"SELF_STEPS_PER_S={a.steps / total:.3f}")
    print(f"SELF_INPUT_FRACTION={waits / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
