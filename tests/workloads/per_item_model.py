"""A model built anew for each input file, as many inference scripts write it (stdlib + torch).

``infer(path)`` constructs a small CNN, loads the weights saved once up front
(``model.load_state_dict(torch.load(...))``), reads and preprocesses one image file and runs the
network on it; the script calls it for each of ``--files`` files it writes to a temporary
folder. A rebuilt model is a new object each time: the loop is the calls of ``infer``.

It prints its own truth as one JSON line: ``{"loop": N, "seconds": s, "build": f, "prep": f,
"forward": f}``, the iterations after the first (the first only starts a clock that times a
step from one model call to the next) and the fractions of the loop's time spent building and
loading the model, reading and preprocessing the file, and running the forward pass.
``--keras``: the same with a Keras model (``load_weights``, ``predict_on_batch``). Nothing here
knows about sofa-top.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--files", type=int, default=40)
parser.add_argument("--keras", action="store_true")
args = parser.parse_args()
perf = time.perf_counter
SIZE = 224
times = {"build": 0.0, "prep": 0.0, "forward": 0.0}


def write_images(folder: str) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(args.files):
        path = os.path.join(folder, f"img{i:03d}.npy")
        np.save(path, rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))
        paths.append(path)
    return paths


def preprocess(path: str) -> np.ndarray:
    img = np.load(path).astype(np.float32) / 255.0
    img = (img - img.mean(axis=(0, 1))) / (img.std(axis=(0, 1)) + 1e-6)
    for _ in range(16):  # a blur, as a resize or a filter would be: the file's own work
        img = (img + np.roll(img, 1, axis=0) + np.roll(img, 1, axis=1)) / 3.0
    return img


def run_torch(paths: list[str], folder: str) -> int:
    import torch
    from torch import nn

    torch.set_num_threads(1)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(64, 64, 3, padding=1),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
            )
            self.head = nn.Sequential(
                nn.Linear(64, 2048),
                nn.ReLU(),
                nn.Linear(2048, 2048),
                nn.ReLU(),
                nn.Linear(2048, 10),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(x).flatten(1))

    weights = os.path.join(folder, "net.pt")
    torch.save(Net().state_dict(), weights)

    def infer(path: str) -> int:
        t0 = perf()
        model = Net()
        model.load_state_dict(torch.load(weights))
        model.eval()
        t1 = perf()
        x = torch.from_numpy(preprocess(path)).permute(2, 0, 1)[None]
        t2 = perf()
        with torch.no_grad():
            y = model(x)
        t3 = perf()
        times["build"] += t1 - t0
        times["prep"] += t2 - t1
        times["forward"] += t3 - t2
        return int(y.argmax())

    return timed(paths, infer)


def run_keras(paths: list[str], folder: str) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    def build() -> keras.Model:
        return keras.Sequential(
            [
                keras.Input((SIZE, SIZE, 3)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )

    weights = os.path.join(folder, "net.weights.h5")
    build().save_weights(weights)

    def infer(path: str) -> int:
        t0 = perf()
        model = build()
        model.load_weights(weights)
        t1 = perf()
        x = preprocess(path)[None]
        t2 = perf()
        y = model.predict_on_batch(x)
        t3 = perf()
        times["build"] += t1 - t0
        times["prep"] += t2 - t1
        times["forward"] += t3 - t2
        return int(np.argmax(y))

    return timed(paths, infer)


def timed(paths: list[str], infer: object) -> int:
    assert callable(infer)
    infer(paths[0])  # the first call only starts the clock
    for k in times:
        times[k] = 0.0
    t_start = perf()
    for path in paths[1:]:
        infer(path)
    loop_s = perf() - t_start
    truth = {"loop": len(paths) - 1, "seconds": round(loop_s, 3)}
    truth.update({k: round(v / loop_s, 4) for k, v in times.items()})
    print(json.dumps(truth), flush=True)
    return 0


with tempfile.TemporaryDirectory() as folder:
    files = write_images(folder)
    raise SystemExit(run_keras(files, folder) if args.keras else run_torch(files, folder))
