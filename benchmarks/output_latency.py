"""Delay from a workload's ``print`` to the session's ``log`` event, without PYTHONUNBUFFERED.

A launched workload prints ``--lines`` lines, each holding the wall time it was printed at,
``--every`` seconds apart (jittered, never flushed); the delay of each is its ``log`` event's
timestamp minus that time. Prints the median, the 10th-90th percentiles and the range, per
repeat. Usage::

    python benchmarks/output_latency.py [--repeats 3] [--lines 40] [--every 0.1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sofa_top.launch import LaunchRequest, Sampling, open_launch  # noqa: E402
from sofa_top.recording.reader import SessionReader  # noqa: E402

WORKLOAD = """
import random, sys, time
random.seed(0)
for i in range({lines}):
    print(f"at {{time.time():.6f}}")
    time.sleep({every} * random.uniform(0.5, 1.5))
"""


def one(lines: int, every: float, tmp: Path) -> list[float]:
    """The delays (seconds) of one run's lines."""
    env_before = os.environ.pop("PYTHONUNBUFFERED", None)
    try:
        code = WORKLOAD.format(lines=lines, every=every)
        req = LaunchRequest(
            cmd=(sys.executable, "-c", code),
            output=str(tmp / "s.db"),
            sampling=Sampling(stacks=False),
        )
        run = open_launch(req)
        run.start()
        run.session.wait(60 + lines * every * 2)
        run.finish("done")
    finally:
        if env_before is not None:
            os.environ["PYTHONUNBUFFERED"] = env_before
    reader = SessionReader(tmp / "s.db")
    try:
        events = [e for e in reader.events("log") if e.message.startswith("at ")]
    finally:
        reader.close()
    (tmp / "s.db").unlink()
    return [e.ts - float(e.message.split()[1]) for e in events]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lines", type=int, default=40)
    p.add_argument("--every", type=float, default=0.1)
    a = p.parse_args()
    all_delays: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            d = one(a.lines, a.every, Path(tmp))
            all_delays += d
            q = statistics.quantiles(d, n=10)
            ms = [x * 1e3 for x in (statistics.median(d), q[0], q[-1], min(d), max(d))]
            print(
                f"repeat {r + 1}: {len(d)}/{a.lines} lines, delay median {ms[0]:.0f} ms "
                f"(p10 {ms[1]:.0f} .. p90 {ms[2]:.0f}; {ms[3]:.0f} .. {ms[4]:.0f})"
            )
    q = statistics.quantiles(all_delays, n=10)
    print(
        f"all: median {statistics.median(all_delays) * 1e3:.0f} ms, p10 {q[0] * 1e3:.0f}, "
        f"p90 {q[-1] * 1e3:.0f}, max {max(all_delays) * 1e3:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
