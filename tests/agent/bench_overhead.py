"""Agent overhead: step time with the agent on vs off, in paired blocks inside one process.

Not a test (pytest does not collect it). Usage::

    python tests/agent/bench_overhead.py [--rounds 30] [--steps 50] [--only PATH ...]

Throughput of separate runs with and without the agent is hopeless on a shared 2-core box
(paired runs swing by 2x with other people's load). So each path runs once, with the agent
injected, and alternates blocks of ``--steps`` steps with the agent on (``agent.enabled``)
and off (every hook then falls straight through to the original; the drain thread idles).
Adjacent blocks share the load, and the median of the per-round ratios cancels it out. For
keras-fit, "off" runs the same traced train function (the in-graph step timer's ops are in
it), so the ratio prices the timer's Python side; ``benchmarks/keras_spe.py`` prices its
in-graph ops (a timed model against a plain one). One-time costs (sitecustomize, connecting,
hooking imports) are not included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PATHS = ("plain", "tf-eager", "keras-fit", "torch-dataloader", "torch-optimizer")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _plain(steps: int) -> Callable[[], None]:
    from sofa_top.agent import api

    def forever() -> Any:
        while True:
            yield 1

    it = iter(api.iterate(forever()))

    def block() -> None:
        for _ in range(steps):
            next(it)
            _spin(0.001)

    return block


def _tf_eager(steps: int) -> Callable[[], None]:
    import tensorflow as tf

    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.fill((64,), tf.cast(i, tf.float32)))
    it = iter(ds.batch(32).prefetch(2))
    w = tf.Variable(tf.random.normal((64, 256)) * 0.01)
    v = tf.Variable(tf.random.normal((256, 256)) * 0.01)

    @tf.function  # type: ignore[untyped-decorator]
    def step(x: Any) -> Any:
        return tf.reduce_sum(tf.tanh(tf.matmul(tf.tanh(tf.matmul(x, w)), v)))

    def block() -> None:
        for _ in range(steps):
            step(next(it)).numpy()

    return block


def _keras_fit(steps: int) -> Callable[[], None]:
    import numpy as np
    import tensorflow as tf

    x = np.random.rand(64 * 200, 64).astype("float32")
    y = (x.sum(1) > 32).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
    inputs = tf.keras.Input((64,))
    h = tf.keras.layers.Dense(128, activation="relu")(inputs)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(h))
    model.compile(optimizer="sgd", loss="mse")

    def block() -> None:
        model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)

    return block


def _torch(steps: int, loader: bool) -> Callable[[], None]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(10**5, 64), torch.randint(0, 4, (10**5,)))
    # without a loader the optimizer hook is the step clock: never touch one in that case
    it = iter(DataLoader(data, batch_size=32, shuffle=True, num_workers=0)) if loader else None
    xb, yb = data[:32]

    def block() -> None:
        for _ in range(steps):
            x, y = next(it) if it is not None else (xb, yb)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            opt.step()

    return block


def inner(path: str, rounds: int, steps: int) -> None:
    from sofa_top.agent import core

    agent = core.AGENT
    assert agent is not None and agent.enabled, "run with the agent injected"
    makers: dict[str, Callable[[int], Callable[[], None]]] = {
        "plain": _plain,
        "tf-eager": _tf_eager,
        "keras-fit": _keras_fit,
        "torch-dataloader": lambda n: _torch(n, True),
        "torch-optimizer": lambda n: _torch(n, False),
    }
    block = makers[path](steps)
    block()  # warm up (tracing, allocation)
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            agent.enabled = on
            t, c = time.perf_counter(), time.process_time()
            block()
            wall[on].append((time.perf_counter() - t) / steps)
            cpu[on].append((time.process_time() - c) / steps)
    agent.enabled = True
    ratios = [a / b for a, b in zip(wall[True], wall[False], strict=True)]
    cpu_ratios = [a / b for a, b in zip(cpu[True], cpu[False], strict=True)]
    print(
        f"{path:17s} step off {statistics.median(wall[False]) * 1e3:7.3f} ms"
        f"  on {statistics.median(wall[True]) * 1e3:7.3f} ms"
        f"  median paired ratio on/off: time {_spread(ratios)}"
        f"  cpu {_spread(cpu_ratios)}  ({rounds} rounds x {steps} steps)",
        flush=True,
    )


def _spread(values: list[float]) -> str:
    """The median, with the quartiles and the extremes."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (
        f"{statistics.median(values):.4f} (IQR {q1:.3f}..{q3:.3f},"
        f" min-max {min(values):.3f}..{max(values):.3f})"
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--inner", choices=PATHS, default=None)
    a = p.parse_args()
    if a.inner:
        inner(a.inner, a.rounds, a.steps)
        return 0
    from agent_harness import run_with_agent

    for path in PATHS:
        if a.only and path not in a.only:
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--inner", path]
        cmd += ["--rounds", str(a.rounds), "--steps", str(a.steps)]
        run = run_with_agent(cmd, timeout=1800)
        if run.returncode != 0:
            print(f"{path}: failed\n{run.stderr[-3000:]}")
            continue
        print(run.stdout.strip(), f"| {len(run.steps())} steps reported", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
