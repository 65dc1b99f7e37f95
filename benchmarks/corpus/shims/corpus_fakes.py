"""Data stand-ins that an edit calls by name where a script downloads a data set itself."""

from __future__ import annotations

import numpy as np


def mnist_load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``keras.datasets.mnist.load_data()``: random uint8 digits of the real shapes."""
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, size=(60000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, size=60000).astype(np.uint8)
    x_test = rng.integers(0, 256, size=(10000, 28, 28), dtype=np.uint8)
    y_test = rng.integers(0, 10, size=10000).astype(np.uint8)
    return (x_train, y_train), (x_test, y_test)
