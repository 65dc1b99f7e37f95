"""A tf.data pipeline fed by ``from_generator`` (the tf.data performance guide's shape), iterated
eagerly with a small Keras model's train step.

``--source generator``: one Python generator yields every element, sleeping ``--item-ms`` per
element (a read): serial, input-bound. ``--source interleave``: the guide's fix, an interleave
over ``--shards`` generators, each reading its own index range, ``num_parallel_calls=AUTOTUNE``.
There is no ``map`` in either. Runs for ``--seconds``; prints ``READY`` after the first step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

FEATURES = 16


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--source", choices=("generator", "interleave"), default="generator")
    p.add_argument("--item-ms", type=float, default=2.0)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seconds", type=float, default=60.0)
    a = p.parse_args()
    item_s = a.item_ms / 1000.0
    spec = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))

    def read_items(shard: int = 0, shards: int = 1) -> Iterator[tuple[np.ndarray, int]]:
        i = int(shard)
        while True:
            time.sleep(item_s)
            yield np.full((FEATURES,), i % 7, np.float32), i % 4
            i += int(shards)

    if a.source == "generator":
        ds = tf.data.Dataset.from_generator(read_items, output_signature=spec)
    else:
        ds = tf.data.Dataset.range(a.shards).interleave(
            lambda s: tf.data.Dataset.from_generator(
                read_items, args=(s, a.shards), output_signature=spec
            ),
            cycle_length=a.shards,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    ds = ds.batch(a.batch)
    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(4)])
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    end = time.monotonic() + a.seconds
    ready = False
    it = iter(ds)
    while time.monotonic() < end:
        x, y = next(it)
        step(x, y)
        if not ready:
            print("READY", flush=True)
            ready = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
