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
