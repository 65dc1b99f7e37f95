"""Random stand-ins for the torchvision datasets the corpus uses (no download, no files).

Each dataset has the real length and sample shape (MNIST 60000/10000 x 28x28 uint8, CIFAR10
50000/10000 x 32x32x3); ``CORPUS_SHIM_SCALE`` (a float, default 1) scales the lengths."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def _scaled(n: int) -> int:
    return max(1, int(n * float(os.environ.get("CORPUS_SHIM_SCALE", "1"))))


class _RandomImages(torch.utils.data.Dataset):  # type: ignore[type-arg]
    shape: tuple[int, ...] = (28, 28)
    sizes: tuple[int, int] = (60000, 10000)
    classes_n = 10

    def __init__(
        self,
        root: str = "",
        train: bool = True,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        download: bool = False,
    ) -> None:
        n = _scaled(self.sizes[0] if train else self.sizes[1])
        rng = np.random.default_rng(0 if train else 1)
        self.data = rng.integers(0, 256, size=(n, *self.shape), dtype=np.uint8)
        self.targets = torch.from_numpy(rng.integers(0, self.classes_n, size=n))
        self.transform = transform
        self.target_transform = target_transform
        self.classes = [str(i) for i in range(self.classes_n)]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        img: Any = self.data[index]
        target: Any = int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class MNIST(_RandomImages):
    pass


class FashionMNIST(_RandomImages):
    pass


class CIFAR10(_RandomImages):
    shape = (32, 32, 3)
    sizes = (50000, 10000)


class FakeData(_RandomImages):
    def __init__(
        self,
        size: int = 1000,
        image_size: tuple[int, int, int] = (3, 224, 224),
        num_classes: int = 10,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        random_offset: int = 0,
    ) -> None:
        c, h, w = image_size
        self.shape = (h, w, c)
        self.sizes = (size, size)
        self.classes_n = num_classes
        super().__init__(transform=transform, target_transform=target_transform)
