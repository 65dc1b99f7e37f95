"""SOFA case study, PyTorch: inference over JPEG files with one of four preprocessing methods.

Usage: ``python sofa_case_torch.py --model alexnet|vgg11|googlenet --method
loop|serial|parallel|compiled [--images DIR|N] [--seconds S]`` (see ``sofa_case_common.py``
for the methods and the measure; the last stdout line is the result JSON).

Per file: PIL ``Image.open(...).convert("RGB").resize((SIZE, SIZE))`` -> numpy -> a CHW float
tensor standardised per image with torch ops (no torchvision); then the hand-written
``nn.Module`` (random weights) under ``torch.no_grad()`` and the predictions read back with
``.argmax(1).cpu()``.

- ``loop``: that function per file in the loop body, then ``torch.stack``;
- ``serial``: a ``Dataset`` whose ``__getitem__`` is that function, ``DataLoader(num_workers=0)``;
- ``parallel``: ``DataLoader(num_workers=W, persistent_workers=True)`` (W: the usable cores);
- ``compiled``: ``parallel`` with ``torch.compile(model)``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from sofa_case_common import CLASSES, fail, image_files, measure, parse_args
from torch import nn
from torch.utils.data import DataLoader, Dataset


def conv(cin: int, cout: int, k: int, s: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=s, padding=k // 2), nn.ReLU())


class ConvNet(nn.Module):
    """A convolutional stack, then the fully connected head (256, 256, classes)."""

    def __init__(self, features: nn.Sequential, size: int) -> None:
        super().__init__()
        self.features = features
        n = features(torch.zeros(1, 3, size, size)).numel()
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(n, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, CLASSES),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))  # type: ignore[no-any-return]


def alexnet(size: int) -> nn.Module:
    features = nn.Sequential(
        conv(3, 32, 5, 2), nn.MaxPool2d(3, 2),
        conv(32, 64, 5), nn.MaxPool2d(3, 2),
        conv(64, 96, 3), conv(96, 96, 3), conv(96, 64, 3), nn.MaxPool2d(3, 2),
    )  # fmt: skip
    return ConvNet(features, size)


def vgg11(size: int) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for c in (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M"):
        if c == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers.append(conv(cin, int(c), 3))
            cin = int(c)
    return ConvNet(nn.Sequential(*layers), size)


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int) -> None:
        super().__init__()
        self.b1 = conv(cin, c1, 1)
        self.b2 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3))
        self.b3 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, padding=1), conv(cin, cp, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class GoogLeNet(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            conv(3, 32, 7, 2), nn.MaxPool2d(3, 2, padding=1),
            conv(32, 32, 1), conv(32, 96, 3), nn.MaxPool2d(3, 2, padding=1),
            Inception(96, 32, 48, 64, 8, 16, 16),
            Inception(128, 64, 64, 96, 16, 48, 32),
            nn.MaxPool2d(3, 2, padding=1),
            Inception(240, 96, 48, 104, 8, 24, 32),
            Inception(256, 80, 56, 112, 12, 32, 32),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, CLASSES),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)  # type: ignore[no-any-return]


MODELS: dict[str, Callable[[int], nn.Module]] = {
    "alexnet": alexnet,
    "vgg11": vgg11,
    "googlenet": GoogLeNet,
}


def load(path: str, size: int) -> torch.Tensor:
    """Decode, resize and standardise one JPEG (as tf.image.per_image_standardization)."""
    from PIL import Image

    with Image.open(path) as im:
        rgb = np.array(im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
    t = torch.from_numpy(rgb).permute(2, 0, 1).float()
    return (t - t.mean()) / t.std().clamp_min(1.0 / math.sqrt(t.numel()))


class JpegFiles(Dataset[torch.Tensor]):
    def __init__(self, files: list[str], size: int) -> None:
        self.files, self.size = files, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return load(self.files[i], self.size)


def main() -> int:
    a = parse_args("torch")
    try:
        import PIL  # noqa: F401
    except ImportError:
        fail("this workload decodes JPEGs with Pillow: pip install pillow")
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch.cuda.is_available() is False (no CUDA device or CPU build)")
    with image_files(a.images) as files:
        if a.method != "loop" and len(files) < a.batch:
            fail(f"--images: {len(files)} files make no full batch of {a.batch}")
        device = torch.device(a.device)
        model = MODELS[a.model](a.size).eval().to(device)
        call = torch.compile(model) if a.method == "compiled" else model

        def predict(x: torch.Tensor) -> object:
            with torch.no_grad():
                return call(x.to(device, non_blocking=True)).argmax(1).cpu()

        names = [str(p) for p in files]
        if a.method == "loop":
            pos = 0

            def get_batch() -> torch.Tensor:
                nonlocal pos
                images = []
                for _ in range(a.batch):
                    images.append(load(names[pos % len(names)], a.size))
                    pos += 1
                return torch.stack(images)
        else:
            workers = 0 if a.method == "serial" else a.workers
            loader = DataLoader(
                JpegFiles(names, a.size),
                batch_size=a.batch,
                drop_last=True,
                num_workers=workers,
                persistent_workers=workers > 0,
                pin_memory=a.device == "cuda",
            )

            def forever() -> Iterator[torch.Tensor]:
                while True:
                    yield from loader

            it = forever()

            def get_batch() -> torch.Tensor:
                return next(it)

        measure(
            a,
            "torch",
            get_batch,
            predict,
            files=len(files),
            params=sum(p.numel() for p in model.parameters()),
            workers=a.workers if a.method in ("parallel", "compiled") else 0,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
