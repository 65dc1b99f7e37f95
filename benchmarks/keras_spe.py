"""The agent's cost on Keras ``fit``'s compiled train function, in one process.

Two identical models, one whose compiled function carries the agent's in-graph step timer
(``sofa_top.agent.keras_timer.ExecutionTimer``: two ``tf.timestamp`` ops and a ring update per
step, the ring read every 128 steps or 0.25 s), one without; blocks of executions alternate
between them (A B A B ...) so machine drift cancels. Prints the median paired ratio of ms per
step (timed / plain) with the spread, for a small and a larger model, per
``steps_per_execution`` (1: one step per execution, Keras' default). Usage::

    python benchmarks/keras_spe.py [--blocks 15] [--executions 10] [--spe 1 32]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import tensorflow as tf

from sofa_top.agent.hooks_keras import _closure_cell
from sofa_top.agent.keras_timer import ExecutionTimer


def model(width: int, depth: int, spe: int) -> Any:
    inp = tf.keras.Input((64,))
    h = inp
    for _ in range(depth):
        h = tf.keras.layers.Dense(width, activation="relu")(h)
    m = tf.keras.Model(inp, tf.keras.layers.Dense(1, activation="sigmoid")(h))
    m.compile(optimizer="sgd", loss="binary_crossentropy", steps_per_execution=spe)
    m.make_train_function()
    return m


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--executions", type=int, default=10)
    p.add_argument("--spe", type=int, nargs="+", default=[1, 32])
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32 * 256, 64)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    for spe, (width, depth) in itertools.product(a.spe, ((64, 1), (512, 3))):
        executions = a.executions * max(1, 32 // spe)  # about as many steps per block
        plain, timed = model(width, depth, spe), model(width, depth, spe)
        cell = _closure_cell(timed.train_function, "one_step_on_data")
        assert cell is not None, "this Keras has no one_step_on_data in its train function"
        timer = ExecutionTimer(tf, cell, spe, lambda *_step: None)
        it_plain, it_timed = iter(ds), iter(ds)

        def block(
            m: Any, it: Any, t: ExecutionTimer | None, executions: int = executions, spe: int = spe
        ) -> tuple[float, float]:
            """(wall, process CPU) ms per step of ``executions`` executions."""
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(executions):
                t1 = time.perf_counter()
                started = t.begin() if t is not None else 0.0
                m.train_function(it)
                if t is not None:
                    t.end(it, t1, time.perf_counter(), started)
            if t is not None:
                t.flush()
            steps = executions * spe
            wall = (time.perf_counter() - t0) / steps * 1e3
            return wall, (time.process_time() - c0) / steps * 1e3

        block(plain, it_plain, None), block(timed, it_timed, timer)  # trace and warm up
        walls, cpus = [], []
        for _ in range(a.blocks):
            wall_plain, cpu_plain = block(plain, it_plain, None)
            wall_timed, cpu_timed = block(timed, it_timed, timer)
            walls.append(wall_timed / wall_plain)
            cpus.append(cpu_timed / cpu_plain)
        print(
            f"Dense {width}x{depth}, steps_per_execution={spe}: timed/plain per step: wall "
            f"{_spread(walls)}, CPU {_spread(cpus)}, {a.blocks} pairs; plain "
            f"{wall_plain:.3f} ms/step"
        )
    return 0


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} ({min(values):.3f} .. {max(values):.3f})"


if __name__ == "__main__":
    sys.exit(main())
