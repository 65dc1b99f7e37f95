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

With ``--steps-per-execution N > 1`` the callbacks run once per N steps, and inside the compiled
loop Keras fetches batch ``k + 1`` while step ``k`` computes. A ``tf.py_function`` at the end
of ``train_step`` marks ``done`` (step ``k`` finished); step ``k`` waited from the previous
step's ``done`` (or the execution's ``asked``, for its first step) until its batch was
``ready`` (lower bound) / ``received`` (upper bound), or not at all when the batch was there
first. Warm-up is then counted in whole executions (``SELF_FIRST_STEP`` is the first measured
step).

``--source memory``: ``fit`` on NumPy arrays (Keras makes the tf.data pipeline): there is no
batch-making function, so the lower bound is 0.

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
    p.add_argument("--source", choices=("pipeline", "memory"), default="pipeline")
    p.add_argument(
        "--threads", type=int, default=0, help="TensorFlow intra-op threads (0: default)"
    )
    a = p.parse_args()
    if a.threads:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
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
    fit_args: dict[str, object] = {"x": ds}
    if a.source == "memory":
        x_all, y_all = make_batch(np.arange(n * a.batch))
        ready.clear()
        fit_args = {"x": x_all, "y": y_all, "batch_size": a.batch, "shuffle": False}

    inputs = tf.keras.Input((FEATURES,))
    h = inputs
    for _ in range(depth):
        h = tf.keras.layers.Dense(width, activation="relu")(h)
    received: list[float] = []
    done: list[float] = []

    def note_received(n: tf.Tensor) -> tf.Tensor:
        received.append(time.perf_counter())
        return n

    def note_done(_: tf.Tensor) -> None:
        done.append(time.perf_counter())

    class TimedModel(tf.keras.Model):  # type: ignore[misc]
        def train_step(self, data: tuple[tf.Tensor, tf.Tensor]) -> dict[str, tf.Tensor]:
            # runs in the compiled step as soon as the batch has arrived there; the step
            # waits for it, so ``received`` is before the step computes anything
            token = tf.py_function(note_received, [tf.shape(data[0])[0]], tf.int32)
            with tf.control_dependencies([token]):
                data = tf.nest.map_structure(tf.identity, data)
            logs = super().train_step(data)
            # done once the weights are updated too (the metrics are ready before that); the
            # reads come after the updates in program order, so they wait for them
            updated = [tf.identity(v.value) for v in self.trainable_variables]
            with tf.control_dependencies([*tf.nest.flatten(logs), *updated]):
                tf.py_function(note_done, [tf.shape(data[0])[0]], [])
            return logs  # type: ignore[no-any-return]

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

    model.fit(**fit_args, epochs=a.epochs, verbose=0, callbacks=[Timer()])  # type: ignore[arg-type]
    if a.steps_per_execution != 1:
        return report_executions(a, asked, ends, ready, received, done)
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


def report_executions(
    a: argparse.Namespace,
    asked: list[float],
    ends: list[float],
    ready: list[float],
    received: list[float],
    done: list[float],
) -> int:
    """The fractions with several steps per execution (the last epoch; see the docstring)."""
    spe = a.steps_per_execution
    steps = a.warmup + a.steps
    per_epoch = -(-steps // spe)  # executions per epoch
    if len(received) != len(done) or len(asked) != per_epoch * a.epochs:
        print(f"unexpected: {len(received)} steps, {len(asked)} executions", file=sys.stderr)
        return 3
    first_exec = max(1, -(-a.warmup // spe))  # whole executions of warm-up
    first_step = first_exec * spe
    base = len(received) - steps  # the last epoch's first step
    lower = upper = 0.0
    for k in range(first_step, steps):
        prev = asked[len(asked) - per_epoch + k // spe] if k % spe == 0 else done[base + k - 1]
        upper += max(0.0, received[base + k] - prev)
        if ready:
            lower += max(0.0, ready[base + k] - prev)
    total = ends[-1] - ends[len(ends) - per_epoch + first_exec - 1]
    print(f"SELF_FIRST_STEP={first_step}")
    print(f"SELF_STEPS_PER_S={(steps - first_step) / total:.3f}")
    print(f"SELF_INPUT_FRACTION_LOWER={lower / total:.4f}")
    print(f"SELF_INPUT_FRACTION_UPPER={upper / total:.4f}")
    print(f"SELF_INPUT_FRACTION={(lower + upper) / 2 / total:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
