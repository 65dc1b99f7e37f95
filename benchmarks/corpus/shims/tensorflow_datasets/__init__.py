"""A stand-in for ``tensorflow_datasets.load`` with random data of the real shapes (no download).

Only ``mnist`` is known: 60000 train / 10000 test examples of 28x28x1 uint8 images and int64
labels, ``CORPUS_SHIM_SCALE`` scales the lengths."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import numpy as np
import tensorflow as tf

_SHAPES = {"mnist": ((28, 28, 1), 10, {"train": 60000, "test": 10000})}


def load(
    name: str,
    split: str = "train",
    as_supervised: bool = False,
    with_info: bool = False,
    **_: Any,
) -> Any:
    shape, classes, sizes = _SHAPES[name]
    n = max(1, int(sizes[split] * float(os.environ.get("CORPUS_SHIM_SCALE", "1"))))
    rng = np.random.default_rng(0 if split == "train" else 1)
    images = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    labels = rng.integers(0, classes, size=n).astype(np.int64)
    if as_supervised:
        ds = tf.data.Dataset.from_tensor_slices((images, labels))
    else:
        ds = tf.data.Dataset.from_tensor_slices({"image": images, "label": labels})
    if not with_info:
        return ds
    info = SimpleNamespace(
        name=name,
        splits={k: SimpleNamespace(num_examples=v) for k, v in sizes.items()},
        features={"label": SimpleNamespace(num_classes=classes)},
    )
    return ds, info
