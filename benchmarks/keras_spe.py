"""The agent's cost on Keras ``fit`` with ``steps_per_execution > 1``, in one process.

Two identical models, one whose compiled multi-step loop carries the agent's in-graph step
timer (``sofa_top.agent.hooks_keras.ExecutionTimer``: two ``tf.timestamp`` ops and a variable
update per step, one assign and one read per execution), one without; blocks of executions
alternate between them (A B A B ...) so machine drift cancels. Prints the median paired ratio
of ms per step (timed / plain) with the spread, for a small and a larger model. Usage::

    python benchmarks/keras_spe.py [--blocks 15] [--executions 10] [--spe 32]
"""

from __future__ import annotations

import argparse
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

from sofa_top.agent.hooks_keras import ExecutionTimer, _closure_cell


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
    p.add_argument("--spe", type=int, default=32)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32 * 256, 64)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    for width, depth in ((64, 1), (512, 3)):
        plain, timed = model(width, depth, a.spe), model(width, depth, a.spe)
        cell = _closure_cell(timed.train_function, "one_step_on_data")
        assert cell is not None, "this Keras has no one_step_on_data in its train function"
        timer = ExecutionTimer(tf, cell)
        it_plain, it_timed = iter(ds), iter(ds)

        def block(m: Any, it: Any, t: ExecutionTimer | None) -> float:
            t0 = time.perf_counter()
            for _ in range(a.executions):
                if t is not None:
                    t.start()
                m.train_function(it)
                if t is not None:
                    t.read()
            return (time.perf_counter() - t0) / (a.executions * a.spe) * 1e3

        block(plain, it_plain, None), block(timed, it_timed, timer)  # trace and warm up
        ratios = []
        for _ in range(a.blocks):
            ms_plain = block(plain, it_plain, None)
            ms_timed = block(timed, it_timed, timer)
            ratios.append(ms_timed / ms_plain)
        med = statistics.median(ratios)
        print(
            f"Dense {width}x{depth}, steps_per_execution={a.spe}: timed/plain step time "
            f"median {med:.3f} ({min(ratios):.3f} .. {max(ratios):.3f}), {a.blocks} pairs; "
            f"plain {ms_plain:.3f} ms/step"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
