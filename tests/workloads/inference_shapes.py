"""Loops that prepare their input in their own body, then call a model (the SOFA case).

``--shape``:

* ``tf-eager``: per image ``tf.io.decode_jpeg``, ``tf.image.resize``, standardise (eager
  TensorFlow ops in a Python loop), then a Keras CNN called on the batch.
* ``pil``: PIL decodes and resizes, NumPy normalises; a PyTorch CNN in ``eval()`` mode (no
  ``no_grad``: an inference script that forgot it).
* ``torch-nograd``: TensorFlow decodes and resizes the images, a PyTorch CNN under
  ``torch.no_grad()`` runs them (TensorFlow is imported only to decode).
* ``keras-predict``: PIL/NumPy preprocessing, then ``model.predict_on_batch(x)`` per batch.
* ``keras-predict-ds``: one ``model.predict(ds)`` over a serial tf.data map that decodes and
  resizes (Keras' own loop: its truth times the gaps between Keras' predict-function calls).
* ``keras-evaluate``: PIL/NumPy preprocessing, then ``model.test_on_batch(x, y)`` per batch.
* ``train-inloop``: a PyTorch training loop (forward, loss, backward, ``optimizer.step()``)
  whose batches are decoded and augmented in the loop body with PIL/NumPy.
* ``serving``: one request at a time from a queue a producer thread fills: decode,
  preprocess, a PyTorch CNN on a batch of one under ``torch.inference_mode()``.
* ``torch-compute``: the ``torch-nograd`` model, much wider, on a batch decoded once (the loop
  body only flips it): compute-bound.
* ``keras-fit-val``: Keras ``fit`` with ``validation_data`` (its validation runs inside
  ``fit``), then one ``evaluate``: the evaluation batches are a phase of their own.
* ``torch-eval``: ``train-inloop`` with an evaluation pass (``model.eval()``, ``no_grad``)
  of ``--eval-batches`` batches after every ``--eval-every`` training steps.

Each measures its own truth with ``perf_counter``: the time inside the model call (with the
loss, backward and optimizer step when training) against the loop's whole time; the rest is
preprocessing. With ``--window FILE`` only the steps run while that file exists count (attach
tests); it prints ``LOOP_STARTED`` once warm, ``READY`` after ``--warmup`` steps and, at the
end, ``PREP_FRACTION=``, ``STEPS=`` (and ``EVAL_STEPS=``, ``EVAL_PREP_FRACTION=`` for
``torch-eval``). It runs ``--seconds`` or until ``--stop FILE`` exists. Nothing here knows
about sofa-top.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

BATCH = 8
SIZE = 96  # the model's input side
SOURCE = 256  # the encoded images' side


class Truth:
    """Sums the loop's time and its model time over the steps that count."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.window: str | None = args.window
        self.stop: str | None = args.stop
        self.seconds = args.seconds
        self.until = float("inf")
        self.warmup = args.warmup
        self.seen = 0
        self.steps = 0
        self.total = self.model = 0.0

    def started(self) -> None:
        """The loop begins: it runs ``--seconds`` from here."""
        self.until = time.monotonic() + self.seconds
        print("LOOP_STARTED", flush=True)

    def more(self) -> bool:
        return not (self.stop and os.path.exists(self.stop)) and time.monotonic() < self.until

    def add(self, step_s: float, model_s: float) -> None:
        self.seen += 1
        if self.seen == self.warmup:
            print("READY", flush=True)
        if self.seen <= self.warmup or (self.window and not os.path.exists(self.window)):
            return
        self.steps += 1
        self.total += step_s
        self.model += model_s

    def report(self, prefix: str = "") -> None:
        frac = 1.0 - self.model / self.total if self.total else 0.0
        print(f"{prefix}STEPS={self.steps}")
        print(f"{prefix}PREP_FRACTION={frac:.4f}", flush=True)


def jpegs(n: int = 16) -> list[bytes]:
    """Synthetic photographs-ish: smooth gradients and noise, JPEG-encoded with PIL."""
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    yy, xx = np.mgrid[0:SOURCE, 0:SOURCE]
    for i in range(n):
        base = (np.sin(xx / (7 + i)) + np.cos(yy / (11 + i))) * 60 + 128
        noise = rng.normal(0, 20, (SOURCE, SOURCE, 3))
        img = np.stack([base, base[::-1], base.T], axis=-1) + noise
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG")
        out.append(buf.getvalue())
    return out


def pil_batch(
    files: list[bytes], start: int, n: int = BATCH, channels_last: bool = False
) -> np.ndarray:
    """Decode, resize, flip and normalise ``n`` images with PIL and NumPy (float32; NCHW, or
    NHWC for Keras: TensorFlow's CPU Conv2D runs NHWC only)."""
    from PIL import Image

    out = []
    for k in range(n):
        data = files[(start + k) % len(files)]
        img = Image.open(io.BytesIO(data)).convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
        a = np.asarray(img, dtype=np.float32) / 255.0
        if (start + k) % 2:
            a = a[:, ::-1]
        a = (a - a.mean(axis=(0, 1))) / (a.std(axis=(0, 1)) + 1e-6)
        out.append(a if channels_last else a.transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(out))


def tf_batch(tf: Any, files: list[bytes], start: int, n: int = BATCH) -> Any:
    """Decode, resize and standardise ``n`` images with eager TensorFlow ops (NHWC)."""
    images = []
    for k in range(n):
        img = tf.io.decode_jpeg(files[(start + k) % len(files)], channels=3)
        img = tf.image.resize(tf.image.convert_image_dtype(img, tf.float32), (SIZE, SIZE))
        images.append(tf.image.per_image_standardization(img))
    return tf.stack(images)


def torch_cnn(width: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
    )  # fmt: skip


def keras_cnn(width: int) -> Any:
    """A small NHWC CNN (TensorFlow's CPU Conv2D runs NHWC only: keras 3.15 / TF 2.21 fail
    on NCHW, "Conv2D op currently only supports the NHWC tensor format on the CPU")."""
    import keras

    shape = (SIZE, SIZE, 3)
    fmt = "channels_last"
    model = keras.Sequential(
        [
            keras.Input(shape),
            keras.layers.Conv2D(width, 3, strides=2, activation="relu", data_format=fmt),
            keras.layers.Conv2D(width, 3, strides=2, activation="relu", data_format=fmt),
            keras.layers.GlobalAveragePooling2D(data_format=fmt),
            keras.layers.Dense(10),
        ]
    )
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def timed_loop(
    truth: Truth, step: Callable[[int], float], after: Callable[[int], None] | None = None
) -> None:
    """Run ``step(i)`` (it returns its model time) until done, then ``after(i + 1)`` (its time
    not the loop's step); the loop measures the rest."""
    truth.started()
    i = 0
    while truth.more():
        t0 = time.perf_counter()
        model_s = step(i)
        truth.add(time.perf_counter() - t0, model_s)
        i += 1
        if after is not None:
            after(i)


def run_tf_eager(truth: Truth, files: list[bytes]) -> None:
    import tensorflow as tf

    model = keras_cnn(16)

    def step(i: int) -> float:
        x = tf_batch(tf, files, i * BATCH)
        t = time.perf_counter()
        model(x)
        return time.perf_counter() - t

    timed_loop(truth, step)


def run_torch(truth: Truth, files: list[bytes], shape: str) -> None:
    import torch

    torch.set_num_threads(1)
    width = 128 if shape == "torch-compute" else 16
    model = torch_cnn(width).eval()
    if shape in ("torch-nograd", "torch-compute"):
        import tensorflow as tf

        def load(i: int) -> Any:
            nhwc = tf_batch(tf, files, i * BATCH)
            return torch.from_numpy(tf.transpose(nhwc, (0, 3, 1, 2)).numpy())

        base = load(0)

        def step(i: int) -> float:
            # torch-compute: a flip of a batch decoded once, the model heavy
            x = load(i) if shape != "torch-compute" else (base.flip(-1) if i % 2 else base)
            t = time.perf_counter()
            with torch.no_grad():
                model(x)
            return time.perf_counter() - t

    else:

        def step(i: int) -> float:
            x = torch.from_numpy(pil_batch(files, i * BATCH))
            t = time.perf_counter()
            model(x)
            return time.perf_counter() - t

    timed_loop(truth, step)


def run_keras(truth: Truth, files: list[bytes], shape: str) -> None:
    model = keras_cnn(16)
    labels = np.arange(BATCH) % 10

    def step(i: int) -> float:
        x = pil_batch(files, i * BATCH, channels_last=True)
        t = time.perf_counter()
        if shape == "keras-predict":
            model.predict_on_batch(x)
        else:
            model.test_on_batch(x, labels)
        return time.perf_counter() - t

    timed_loop(truth, step)


BATCHES = 240  # keras-predict-ds: one predict over this many batches


def run_keras_predict_ds(truth: Truth, files: list[bytes]) -> None:
    """``model.predict(ds)`` over a serial map; Keras' own loop fetches each batch then calls
    its predict function, which this times: a step runs from the end of one call to the end
    of the next, its wait is the time between the two calls (the fetch, and Keras' bookkeeping
    of the outputs). Predict's setup before its first call and its concatenation of the
    outputs after the last are not steps."""
    import tensorflow as tf

    model = keras_cnn(16)
    data = tf.constant(files)

    def load(i: Any) -> Any:
        img = tf.io.decode_jpeg(tf.gather(data, i % len(files)), channels=3)
        img = tf.image.convert_image_dtype(img, tf.float32)
        img = tf.image.resize(img, (SIZE, SIZE), antialias=True)  # a downscale without aliasing
        return tf.image.per_image_standardization(img)

    ds = tf.data.Dataset.range(BATCHES * BATCH).map(load).batch(BATCH)  # no parallel calls
    model.predict_on_batch(np.zeros((BATCH, SIZE, SIZE, 3), np.float32))  # builds, traces
    compiled = model.predict_function
    calls: list[tuple[float, float]] = []

    def predict_function(batch: Any) -> Any:
        t = time.perf_counter()
        try:
            return compiled(batch)
        finally:
            calls.append((t, time.perf_counter()))

    model.predict_function = predict_function
    truth.started()
    model.predict(ds, verbose=0)
    for (_, end), (start, stop) in itertools.pairwise(calls):
        truth.add(stop - end, stop - start)


def run_keras_fit_val(truth: Truth) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, SIZE, SIZE, 3)).astype(np.float32)
    y = (np.arange(1024) % 10).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    model = keras_cnn(8)
    model.compile(
        optimizer="sgd", loss=__import__("keras").losses.SparseCategoricalCrossentropy(True)
    )
    truth.started()
    model.fit(ds.take(60), validation_data=ds.take(20), epochs=2, verbose=0)
    model.evaluate(ds.take(30), verbose=0)


def run_train(args: argparse.Namespace, truth: Truth, files: list[bytes]) -> None:
    import torch

    torch.set_num_threads(1)
    model = torch_cnn(16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    labels = torch.arange(BATCH) % 10
    evals = Truth(args) if args.shape == "torch-eval" else None
    if evals is not None:
        evals.warmup = 0

    def train(i: int) -> float:
        x = torch.from_numpy(pil_batch(files, i * BATCH))
        t = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = loss_fn(model(x), labels)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    def evaluate(i: int) -> None:
        assert evals is not None
        model.eval()
        with torch.no_grad():
            for k in range(args.eval_batches):
                t0 = time.perf_counter()
                x = torch.from_numpy(pil_batch(files, (i + k) * BATCH, 2 * BATCH))
                t = time.perf_counter()
                model(x)
                t1 = time.perf_counter()
                evals.add(t1 - t0, t1 - t)

    def maybe_evaluate(i: int) -> None:
        if evals is not None and i % args.eval_every == 0:
            evaluate(i)

    if args.loss_first:
        loss_fn(torch.zeros(BATCH, 10), labels)
    timed_loop(truth, train, maybe_evaluate)
    if evals is not None:
        evals.report("EVAL_")


def run_serving(truth: Truth, files: list[bytes]) -> None:
    import torch

    torch.set_num_threads(1)
    model = torch_cnn(16).eval()
    requests: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
    done = threading.Event()

    def produce() -> None:
        i = 0
        while not done.is_set():
            try:
                requests.put(files[i % len(files)], timeout=0.1)
                i += 1
            except queue.Full:
                continue

    producer = threading.Thread(target=produce, name="requests", daemon=True)
    producer.start()

    def step(i: int) -> float:
        data = requests.get()
        assert data is not None
        x = torch.from_numpy(pil_batch([data], 0, 1))
        t = time.perf_counter()
        with torch.inference_mode():
            model(x)
        return time.perf_counter() - t

    try:
        timed_loop(truth, step)
    finally:
        done.set()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", required=True)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--window", default=None)
    p.add_argument("--stop", default=None)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--eval-batches", type=int, default=10)
    # the criterion called once before the loop: the first call the model-call clock sees is
    # the loss's, as when sofa-top attaches inside the model's forward
    p.add_argument("--loss-first", action="store_true")
    args = p.parse_args()
    truth = Truth(args)
    files = jpegs()
    if args.shape == "tf-eager":
        run_tf_eager(truth, files)
    elif args.shape in ("pil", "torch-nograd", "torch-compute"):
        run_torch(truth, files, args.shape)
    elif args.shape in ("keras-predict", "keras-evaluate"):
        run_keras(truth, files, args.shape)
    elif args.shape == "keras-predict-ds":
        run_keras_predict_ds(truth, files)
    elif args.shape == "keras-fit-val":
        run_keras_fit_val(truth)
    elif args.shape in ("train-inloop", "torch-eval"):
        run_train(args, truth, files)
    elif args.shape == "serving":
        run_serving(truth, files)
    else:
        raise SystemExit(f"unknown shape {args.shape}")
    truth.report()
    print("JOB DONE", flush=True)


if __name__ == "__main__":
    main()
