"""``model.fit`` on a tf.data dataset for agent tests; measures its own input fraction.

Inside ``fit`` the batch is pulled by the compiled step, so the workload cannot put a timer
around the fetch. It brackets the wait instead. The pipeline is kept serial (no prefetch, no
autotune, no map parallelization), so batch ``k`` is made on demand inside step ``k``:

* ``asked``: a callback's ``on_train_batch_begin``, just before Keras calls the train function;
* ``ready``: the batch-making ``tf.py_function`` has finished batch ``k`` (tf.data still has to
  hand it over, so ``ready - asked`` is a lower bound of the wait);
* ``received``: a ``tf.py_function`` at the top of the model's ``train_step`` runs once the
  batch has reached the compiled step (``received - asked`` is an upper bound: it adds the
  step's dispatch).

Over the steps after ``--warmup``, with loop time from the end of the last warm-up batch to the
end of the last batch (callback), it prints ``SELF_INPUT_FRACTION_LOWER`` (ready),
``SELF_INPUT_FRACTION_UPPER`` (received) and, last, ``SELF_INPUT_FRACTION`` = their midpoint.

``--mode input``: 25 ms of production per batch, a small model (input-bound).
``--mode compute``: 0.2 ms of production, a much heavier model (compute-bound).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

FEATURES = 64


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("input", "compute"), default="input")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-execution", type=int, default=1)
    a = p.parse_args()
    n = a.warmup + a.steps
    produce_s = 0.025 if a.mode == "input" else 0.0002
    width, depth = (64, 1) if a.mode == "input" else (1024, 4)

    ready: list[float] = []

    def make_batch(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        rng = np.random.default_rng(int(idx[0]))
        x = rng.standard_normal((len(idx), FEATURES)).astype(np.float32)
        y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
        while time.perf_counter() - t0 < produce_s:  # the expensive "decode"
            x = np.tanh(x)
        ready.append(time.perf_counter())
        return x, y

    def to_tensors(idx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x, y = tf.py_function(make_batch, [idx], [tf.float32, tf.float32])
        x.set_shape((None, FEATURES))
        y.set_shape((None, 1))
        return x, y

    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    ds = tf.data.Dataset.range(n * a.batch).batch(a.batch).map(to_tensors)
    ds = ds.with_options(options)

    inputs = tf.keras.Input((FEATURES,))
    h = inputs
    for _ in range(depth):
        h = tf.keras.layers.Dense(width, activation="relu")(h)
    received: list[float] = []

    def note_received(_: tf.Tensor) -> None:
        received.append(time.perf_counter())

    class TimedModel(tf.keras.Model):  # type: ignore[misc]
        def train_step(self, data: tuple[tf.Tensor, tf.Tensor]) -> dict[str, tf.Tensor]:
            # runs in the compiled step as soon as the batch has arrived there
            tf.py_function(note_received, [tf.shape(data[0])[0]], [])
            return super().train_step(data)  # type: ignore[no-any-return]

    model = TimedModel(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(h))
    model.compile(
        optimizer="sgd", loss="binary_crossentropy", steps_per_execution=a.steps_per_execution
    )

    ends: list[float] = []
    asked: list[float] = []

    class Timer(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            asked.append(time.perf_counter())

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            ends.append(time.perf_counter())

    model.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Timer()])
    if a.steps_per_execution != 1:
        print(f"FIT_CALLS={len(asked)}")  # several batches per call: no per-step timing here
        return 0
    if not len(ready) == len(received) == len(asked):
        print(f"unexpected: {len(ready)} batches for {len(asked)} steps", file=sys.stderr)
        return 3
    # the last epoch's batches; its first `warmup` ones are not measured
    m = a.steps
    total = ends[-1] - ends[-m - 1]
    lower = sum(r - q for r, q in zip(ready[-m:], asked[-m:], strict=True)) / total
    upper = sum(r - q for r, q in zip(received[-m:], asked[-m:], strict=True)) / total
    print(f"SELF_STEPS_PER_S={m / total:.3f}")
    print(f"SELF_INPUT_FRACTION_LOWER={lower:.4f}")
    print(f"SELF_INPUT_FRACTION_UPPER={upper:.4f}")
    print(f"SELF_INPUT_FRACTION={(lower + upper) / 2:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
