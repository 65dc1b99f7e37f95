"""Long-running training jobs for the attach tests: they run until a stop file appears (or for
``--seconds``, or ``--train-seconds`` after ``READY``), and measure their own input-wait
fraction while a window file exists.

``--job tf-eager``: ``for x in ds`` over a serial tf.data map (input-bound).
``--job keras``: ``model.fit`` over a serial ``tf.py_function`` pipeline; the wait is bracketed
as in ``agent_keras_fit.py`` (batch asked in ``on_train_batch_begin``, ready when the
``py_function`` returns, received at the top of the compiled ``train_step``: the midpoint).
``--job torch``: ``for x, y in loader`` over a slow pure-Python ``__getitem__`` (input-bound).

It prints ``READY`` once its loop is warm, then, at the end, ``SELF_INPUT_FRACTION=`` over the
steps run while ``--window FILE`` existed, and exits with ``--exit-code``. Nothing here knows
about sofa-top.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class Window:
    """Sums waits and loop time over the steps that run while the window file exists."""

    def __init__(self, path: str, stop: str, seconds: float, train_seconds: float | None) -> None:
        self.path, self.stop, self.until = path, stop, time.monotonic() + seconds
        self.train_seconds = train_seconds
        self.waits = self.total = 0.0
        self.steps = 0

    def ready(self) -> None:
        """The loop is warm: say so, and (with ``--train-seconds``) train that long from now."""
        print("READY", flush=True)
        if self.train_seconds is not None:
            self.until = min(self.until, time.monotonic() + self.train_seconds)

    def add(self, wait: float, step: float) -> None:
        if os.path.exists(self.path):
            self.waits += wait
            self.total += step
            self.steps += 1

    def done(self) -> bool:
        return os.path.exists(self.stop) or time.monotonic() > self.until

    def report(self) -> None:
        print(f"SELF_STEPS={self.steps}")
        print(f"SELF_INPUT_FRACTION={self.waits / self.total if self.total else 0.0:.4f}")


def tf_eager(w: Window) -> None:
    import tensorflow as tf

    def slow_map(i: tf.Tensor) -> tf.Tensor:
        m = tf.random.stateless_normal((160, 160), seed=tf.stack([i, i]))
        for _ in range(6):
            m = tf.linalg.matmul(m, m) / 160.0
        return tf.reduce_sum(m, axis=0)

    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    ds = tf.data.Dataset.range(10**9).map(slow_map).batch(8).with_options(options)
    v = tf.Variable(tf.random.normal((160, 160)) * 0.01)

    @tf.function  # type: ignore[untyped-decorator]
    def step(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.tanh(tf.matmul(x, v)))

    end = time.perf_counter()
    for i, x in enumerate(ds):
        got = time.perf_counter()
        step(x)
        if i == 5:
            w.ready()
        now = time.perf_counter()
        w.add(got - end, now - end)
        end = now
        if w.done():
            break


def keras(w: Window) -> None:
    import numpy as np
    import tensorflow as tf

    ready: list[float] = []

    def make_batch(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        x = np.random.default_rng(int(idx[0])).standard_normal((len(idx), 64)).astype(np.float32)
        y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
        while time.perf_counter() - t0 < 0.025:  # the expensive "decode"
            x = np.tanh(x)
        ready.append(time.perf_counter())
        return x, y

    def to_tensors(idx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x, y = tf.py_function(make_batch, [idx], [tf.float32, tf.float32])
        x.set_shape((None, 64))
        y.set_shape((None, 1))
        return x, y

    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    ds = tf.data.Dataset.range(10**9).batch(32).map(to_tensors).with_options(options)
    received: list[float] = []

    def note_received(_: tf.Tensor) -> None:
        received.append(time.perf_counter())

    class TimedModel(tf.keras.Model):  # type: ignore[misc]
        def train_step(self, data: tuple[tf.Tensor, tf.Tensor]) -> dict[str, tf.Tensor]:
            tf.py_function(note_received, [tf.shape(data[0])[0]], [])
            return super().train_step(data)  # type: ignore[no-any-return]

    inputs = tf.keras.Input((64,))
    h = tf.keras.layers.Dense(64, activation="relu")(inputs)
    model = TimedModel(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(h))
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    state = {"asked": 0.0, "end": 0.0, "n": 0}

    class Timer(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            state["asked"] = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            now = time.perf_counter()
            state["n"] += 1
            if state["n"] == 5:
                w.ready()
            if state["end"] and ready and received:
                wait = ((ready[-1] - state["asked"]) + (received[-1] - state["asked"])) / 2
                w.add(wait, now - state["end"])
            state["end"] = now
            if w.done():
                self.model.stop_training = True

    model.fit(ds, epochs=1, steps_per_epoch=10**8, verbose=0, callbacks=[Timer()])


def torch_loop(w: Window) -> None:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset[tuple[torch.Tensor, int]]):
        def __len__(self) -> int:
            return 10**9

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            acc = 0
            for i in range(8000):  # pure-Python "decoding"
                acc = (acc + i * (index + 1)) % 9973
            return torch.full((64,), float(acc) / 9973.0), index % 4

    model = nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.perf_counter()
    for i, (x, y) in enumerate(DataLoader(Samples(), batch_size=16)):
        got = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()
        if i == 3:
            w.ready()
        now = time.perf_counter()
        w.add(got - end, now - end)
        end = now
        if w.done():
            break


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--job", choices=("tf-eager", "keras", "torch"), required=True)
    p.add_argument("--window", required=True, help="measure while this file exists")
    p.add_argument("--stop", required=True, help="stop once this file exists")
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--train-seconds", type=float, help="stop this long after READY")
    p.add_argument("--exit-code", type=int, default=0)
    a = p.parse_args()
    w = Window(a.window, a.stop, a.seconds, a.train_seconds)
    {"tf-eager": tf_eager, "keras": keras, "torch": torch_loop}[a.job](w)
    w.report()
    print("JOB DONE", flush=True)
    return a.exit_code


if __name__ == "__main__":
    sys.exit(main())
