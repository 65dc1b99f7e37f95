"""What the SOFA case-study workloads share (``sofa_case_tf.py``, ``sofa_case_torch.py``).

Both run inference over JPEG files with one of four preprocessing methods, the ladder of the
SOFA paper (its section on TensorFlow input pipelines and XLA):

- ``loop``: a Python loop over the batch's files in the loop body, each file decoded, resized
  and standardised by eager framework ops (TensorFlow) or PIL + torch ops (PyTorch);
- ``serial``: the same per-file function in the framework's input pipeline, one element at a
  time (a ``tf.data`` map without parallelism; ``DataLoader(num_workers=0)``);
- ``parallel``: the pipeline with parallelism and prefetch (``num_parallel_calls=AUTOTUNE`` +
  ``prefetch``; ``DataLoader(num_workers=cores)``);
- ``compiled``: ``parallel`` with the model compiled (``tf.function(jit_compile=True)``, XLA;
  ``torch.compile``).

The loop measures itself: ``time.perf_counter`` around getting the batch (the preprocessing,
or the wait for the pipeline) and around the model call (forward, then the predictions read
back as host values), after a warm-up (a compile happens there). The last line on stdout is
one JSON object (also written to ``--result FILE``): images/s, the steps, and
``input_fraction`` = preprocessing time over (preprocessing + model) time, the quantity
sofa-top reports as ``steps.input_wait_fraction``. ``READY`` is printed once warm.

``--images`` is a folder of JPEGs, or a count: that many synthetic JPEGs are made in a
temporary folder (removed at exit). No downloads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

METHODS = ("loop", "serial", "parallel", "compiled")
MODELS = ("alexnet", "vgg11", "googlenet")
CLASSES = 10

T = TypeVar("T")


def parse_args(framework: str, argv: list[str] | None = None) -> argparse.Namespace:
    compiled = "XLA: tf.function(jit_compile=True)" if framework == "tf" else "torch.compile"
    p = argparse.ArgumentParser(
        description=f"SOFA case-study inference workload ({framework}): JPEG files -> "
        "decode/resize/standardise -> a small CNN; prints its own measure as JSON last.",
    )
    p.add_argument("--model", choices=MODELS, default="alexnet")
    p.add_argument(
        "--method",
        choices=METHODS,
        default="loop",
        help="loop: Python loop of per-file ops; serial: pipeline without parallelism; "
        f"parallel: parallel map + prefetch; compiled: parallel + {compiled}",
    )
    p.add_argument(
        "--images", default="256", help="folder of JPEG files, or N synthetic ones (default 256)"
    )
    p.add_argument("--seconds", type=float, default=8.0, help="measured time after warm-up")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=64, help="model input: SIZE x SIZE pixels")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default by method)")
    p.add_argument(
        "--workers", type=int, default=None, help="parallel producers (default: usable cores)"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="the model's intra-op threads (default: the framework's own choice)",
    )
    p.add_argument("--result", type=Path, help="also write the result JSON to this file")
    a = p.parse_args(argv)
    if a.batch < 1 or a.size < 32 or a.seconds <= 0 or (a.threads is not None and a.threads < 1):
        p.error("--batch and --threads must be >= 1, --size >= 32 and --seconds > 0")
    if a.warmup is None:
        # pipelines that buffer get their buffers drained before the clock starts
        a.warmup = 2 if a.method in ("loop", "serial") else 8
    if a.workers is None:
        a.workers = usable_cores()
    return a


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fail(msg: str, code: int = 2) -> None:
    """One line on stderr and a non-zero exit (bad input, missing device)."""
    print(msg, file=sys.stderr, flush=True)
    raise SystemExit(code)


def synthetic_jpegs(folder: Path, n: int, width: int = 320, height: int = 240) -> list[Path]:
    """``n`` photo-like JPEGs (smooth colour fields plus noise, quality 90), made here."""
    import numpy as np

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    encode = _jpeg_encoder()
    paths = []
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    for i in range(n):
        coef = rng.uniform(-1, 1, size=(3, 4)).astype(np.float32)
        base = np.stack(
            [
                128
                + 60 * np.sin(c[0] * xs / 23 + c[1] * ys / 31)
                + 40 * np.cos(c[2] * xs / 17 - c[3] * ys / 13)
                for c in coef
            ],
            axis=-1,
        )
        img = np.clip(base + rng.normal(0, 12, size=base.shape), 0, 255).astype(np.uint8)
        path = folder / f"img_{i:05d}.jpg"
        path.write_bytes(encode(img))
        paths.append(path)
    return paths


def _jpeg_encoder() -> Callable[[Any], bytes]:
    try:
        import io

        from PIL import Image

        def pil(img: Any) -> bytes:
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            return buf.getvalue()

        return pil
    except ImportError:
        import tensorflow as tf

        return lambda img: bytes(tf.io.encode_jpeg(img, quality=90).numpy())


@contextmanager
def image_files(spec: str) -> Iterator[list[Path]]:
    """The JPEG files of ``--images``: a folder's, or N made in a temporary folder (removed
    when the block ends)."""
    if spec.isdigit():
        n = int(spec)
        if n < 1:
            fail("--images: need at least one image")
        with tempfile.TemporaryDirectory(prefix="sofa-case-jpegs-") as tmp:
            yield synthetic_jpegs(Path(tmp), n)
        return
    folder = Path(spec)
    if not folder.is_dir():
        fail(f"--images: {spec} is neither a folder nor a number of images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        fail(f"--images: no .jpg files in {folder}")
    yield files


@dataclass
class Meter:
    """The loop's own clock: preprocessing (or the wait for the pipeline) vs the model call."""

    batch: int
    input_s: float = 0.0
    model_s: float = 0.0
    steps: int = 0
    step_s: list[float] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    def run(
        self,
        get_batch: Callable[[], T],
        predict: Callable[[T], object],
        seconds: float,
        warmup: int,
    ) -> None:
        for _ in range(warmup):
            predict(get_batch())
        print("READY", flush=True)
        self.started = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            x = get_batch()
            t1 = time.perf_counter()
            predict(x)
            t2 = time.perf_counter()
            self.input_s += t1 - t0
            self.model_s += t2 - t1
            self.step_s.append(t2 - t0)
            self.steps += 1
            if t2 - self.started >= seconds:
                self.ended = t2
                return

    def result(self, **info: Any) -> dict[str, Any]:
        wall = self.ended - self.started
        steps = sorted(self.step_s)
        busy = self.input_s + self.model_s
        return {
            **info,
            "batch": self.batch,
            "steps": self.steps,
            "measured_s": round(wall, 4),
            "images_per_s": round(self.steps * self.batch / wall, 3) if wall > 0 else None,
            "input_s": round(self.input_s, 4),
            "model_s": round(self.model_s, 4),
            "input_fraction": round(self.input_s / busy, 4) if busy > 0 else None,
            "median_step_s": round(steps[len(steps) // 2], 5) if steps else None,
        }


def measure(
    a: argparse.Namespace,
    framework: str,
    get_batch: Callable[[], T],
    predict: Callable[[T], object],
    **info: Any,
) -> None:
    """Run the loop for ``--seconds`` after its warm-up, then print (and write) the result."""
    meter = Meter(a.batch)
    meter.run(get_batch, predict, a.seconds, a.warmup)
    result = meter.result(
        framework=framework,
        model=a.model,
        method=a.method,
        device=a.device,
        size=a.size,
        threads=a.threads,
        **info,
    )
    emit(result, a.result)


def emit(result: dict[str, Any], path: Path | None) -> None:
    line = json.dumps(result, sort_keys=True)
    if path is not None:
        path.write_text(line + "\n")
    print(line, flush=True)
