"""Stand-ins for the torchvision datasets the corpus uses (no download).

The named data sets are random images with the real length and sample shape (MNIST 60000/10000
x 28x28 uint8, CIFAR10 50000/10000 x 32x32x3); ``CORPUS_SHIM_SCALE`` (a float, default 1)
scales the lengths. ``ImageFolder`` reads a folder of image files (a fixture's) with PIL."""

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


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class ImageFolder(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """``root/<class>/<image>`` files, decoded with PIL (RGB) per item, as torchvision's."""

    def __init__(
        self,
        root: str,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [
            (os.path.join(root, c, f), i)
            for c, i in self.class_to_idx.items()
            for f in sorted(os.listdir(os.path.join(root, c)))
            if f.lower().endswith(IMG_EXTENSIONS)
        ]
        self.targets = [t for _, t in self.samples]
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image

        path, target = self.samples[index]
        with open(path, "rb") as f:
            img: Any = Image.open(f).convert("RGB")
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target
