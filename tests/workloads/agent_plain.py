"""A stdlib-only training-like loop for agent tests: no framework, any Python.

Each step waits ``--input-ms`` for its batch (a generator that sleeps, like slow I/O) and then
computes for ``--compute-ms`` (a busy loop). Under ``sofa-top launch`` it reports its steps via
``sofa_top.agent.api.iterate`` (importable even in a virtualenv without sofa-top); without the
agent it runs the same loop. It times its own waits and prints, as its last line,
``SELF_INPUT_FRACTION=<waits / loop time>`` over the steps after ``--warmup``.

Other modes: ``--flood N`` (N empty steps as fast as possible), ``--exit-code C`` and
``--crash`` (raise after the loop), ``--sleep-after S`` (keep running after the loop).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator

try:
    from sofa_top.agent import api
except ImportError:  # not launched by sofa-top
    api = None  # type: ignore[assignment]


def batches(n: int, input_s: float) -> Iterator[int]:
    for i in range(n):
        if input_s > 0:
            time.sleep(input_s)
        yield i


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--input-ms", type=float, default=10.0)
    p.add_argument("--compute-ms", type=float, default=10.0)
    p.add_argument("--flood", type=int, default=0)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--crash", action="store_true")
    p.add_argument("--sleep-after", type=float, default=0.0)
    a = p.parse_args()

    if a.flood:
        src: Iterable[int] = range(a.flood)
        for _ in api.iterate(src, source="flood") if api else src:
            pass
        print(f"FLOOD_STEPS={a.flood}")
        print(f"FLOOD_DONE_AT={time.time():.6f}")
    else:
        data: Iterable[int] = batches(a.warmup + a.steps, a.input_ms / 1e3)
        it = iter(api.iterate(data, batch_size=1) if api else data)
        waits = 0.0
        start = 0.0
        for i in range(a.warmup + a.steps):
            if i == a.warmup:
                start = time.perf_counter()
            t0 = time.perf_counter()
            next(it)
            if i >= a.warmup:
                waits += time.perf_counter() - t0
            spin(a.compute_ms / 1e3)
        total = time.perf_counter() - start
        for _ in it:  # end of data: closes the agent's last step
            pass
        print(f"AGENT_ACTIVE={int(bool(api and api.active()))}")
        print(f"SELF_STEPS_PER_S={a.steps / total:.3f}")
        print(f"SELF_INPUT_FRACTION={waits / total:.4f}")
    sys.stdout.flush()
    if a.sleep_after:
        time.sleep(a.sleep_after)
    if a.crash:
        raise RuntimeError("workload crashed on purpose")
    return int(a.exit_code)


if __name__ == "__main__":
    sys.exit(main())
