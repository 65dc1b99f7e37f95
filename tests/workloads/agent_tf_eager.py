"""An eager TensorFlow loop over tf.data for agent tests; measures its own input fraction.

``--mode input``: a slow serial ``map`` (heavy tf ops per element, no prefetch) feeding a tiny
step -> input-bound. ``--mode compute``: a cheap prefetched pipeline feeding a heavier compiled
step -> compute-bound. ``--loop next`` pulls with ``next(it)``; ``--loop for`` uses ``for x in
ds`` and takes the gap between the end of one step's compute and the start of the next body as
that step's wait. The last line printed is ``SELF_INPUT_FRACTION=<sum of waits / loop time>``
over the steps after ``--warmup``, on the agent's step boundaries (from one batch's arrival to
the next one's, the last to the end of data: both measure the very same interval, so a stall on
a busy machine lands in both); ``SELF_STEPS_PER_S`` is the throughput of those steps.

``--seconds S``: run until killed or for S seconds (the data repeats), printing ``READY`` once
the warm-up steps are done; for tests that attach to a running loop.
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
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument(
        "--threads", type=int, default=0, help="TensorFlow intra-op threads (0: default)"
    )
    a = p.parse_args()
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    forever = a.seconds > 0
    deadline = time.perf_counter() + a.seconds
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
    if forever:
        ds = ds.repeat()
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

    def go_on(i: int) -> bool:
        """Past the warm-up of a --seconds run: whether its time is not up yet."""
        if i == a.warmup and forever:
            print("READY", flush=True)
        return not forever or i < a.warmup or time.perf_counter() < deadline

    waits = 0.0
    start = 0.0
    steps = 0
    if a.loop == "next":
        it = iter(ds)
        for i in range(10**9 if forever else n):
            t0 = time.perf_counter()
            x = next(it)
            t1 = time.perf_counter()
            if i == a.warmup:
                start = t1  # the agent's step WARMUP starts when this batch arrives
            elif i > a.warmup:
                waits += t1 - t0
                steps += 1
            if not go_on(i):
                break
            step(x).numpy()
        end = time.perf_counter()
        if not forever:
            t0 = time.perf_counter()
            for _ in it:  # drain: the end of data closes the agent's last step
                pass
            end = time.perf_counter()
            waits += end - t0
            steps += 1
    else:
        end_prev = 0.0
        it = iter(ds)  # kept alive: its teardown (prefetch threads) is not the last fetch
        for i, x in enumerate(it):
            now = time.perf_counter()
            if i == a.warmup:
                start = now
            elif i > a.warmup:
                waits += now - end_prev
                steps += 1
            if not go_on(i):
                break
            step(x).numpy()
            end_prev = time.perf_counter()
        end = time.perf_counter()  # the fetch that found the end of data (a step of its own)
        if not forever:
            waits += end - end_prev
            steps += 1
    total = end - start
    print(f"SELF_STEPS_PER_S={steps / total:.3f}")
    print(f"SELF_INPUT_FRACTION={waits / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
