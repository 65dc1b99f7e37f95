"""The torchvision transforms the corpus scripts use, on the shim's uint8 numpy images."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


class Compose:
    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x: Any) -> Any:
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    """HxW or HxWxC uint8 -> CxHxW float in [0, 1], like torchvision's."""

    def __call__(self, pic: Any) -> torch.Tensor:
        a = np.asarray(pic)
        if a.ndim == 2:
            a = a[:, :, None]
        return torch.from_numpy(a.transpose(2, 0, 1).copy()).float().div(255)


class Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return (t - self.mean) / self.std


class Lambda:
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, x: Any) -> Any:
        return self.fn(x)


# PIL-image transforms (super_resolution, imagenet): what torchvision does for a PIL input.


def _size(size: int | Sequence[int]) -> tuple[int, int]:
    """(height, width) of a size argument."""
    if isinstance(size, int):
        return size, size
    return int(size[0]), int(size[1])


class CenterCrop:
    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _size(size)

    def __call__(self, img: Any) -> Any:
        h, w = self.size
        left, top = round((img.width - w) / 2), round((img.height - h) / 2)
        return img.crop((left, top, left + w, top + h))


class Resize:
    """An int resizes the shorter side to it (aspect kept); a pair is (height, width)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size

    def __call__(self, img: Any) -> Any:
        from PIL import Image

        if isinstance(self.size, int):
            short = min(img.width, img.height)
            w, h = img.width * self.size // short, img.height * self.size // short
        else:
            h, w = _size(self.size)
        return img.resize((w, h), Image.Resampling.BILINEAR)


class RandomResizedCrop:
    """A random crop of 8-100% of the area and 3/4-4/3 aspect, resized to ``size``."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = _size(size)

    def __call__(self, img: Any) -> Any:
        import math
        import random

        from PIL import Image

        area = img.width * img.height
        for _ in range(10):
            target = area * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = round(math.sqrt(target * ratio))
            h = round(math.sqrt(target / ratio))
            if 0 < w <= img.width and 0 < h <= img.height:
                left = random.randint(0, img.width - w)
                top = random.randint(0, img.height - h)
                box = (left, top, left + w, top + h)
                return img.resize(self.size[::-1], Image.Resampling.BILINEAR, box=box)
        return CenterCrop(min(img.width, img.height))(img).resize(self.size[::-1])


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: Any) -> Any:
        import random

        from PIL import Image

        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if random.random() < self.p else img
