"""An input-bound eager TensorFlow loop: a tf.data pipeline with a slow serial ``map`` (heavy tf
ops, no prefetch, no parallelism) feeding a tiny eager step.

Usage: ``python tf_input_bound.py [SECONDS]`` (or env ``SOFA_WORKLOAD_SECONDS``; default 30).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf


def duration() -> float:
    """Run time from argv[1], then $SOFA_WORKLOAD_SECONDS, else 30 s."""
    if len(sys.argv) > 1:
        return float(sys.argv[1])
    return float(os.environ.get("SOFA_WORKLOAD_SECONDS", "30"))


def slow_map(i: tf.Tensor) -> tf.Tensor:
    m = tf.random.stateless_normal((160, 160), seed=tf.stack([i, i]))
    for _ in range(6):
        m = tf.linalg.matmul(m, m) / 160.0
    return tf.reduce_sum(m, axis=0)


def main() -> None:
    options = tf.data.Options()
    # keep the pipeline serial: tf.data would otherwise inject a prefetch and parallelize maps
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    ds = tf.data.Dataset.range(10**9).map(slow_map).batch(4).with_options(options)
    w = tf.Variable(tf.zeros((160, 1)))
    end = time.monotonic() + duration()
    for batch in ds:
        w.assign_add(tf.transpose(batch[:1]) * 1e-6)
        if time.monotonic() >= end:
            break


if __name__ == "__main__":
    main()
