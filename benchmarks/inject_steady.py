"""The injected agent's steady-state cost, inside one process: a pure-Python loop times the CPU
of each fixed chunk of work (``time.process_time``: every thread, the agent's included) before
the injection, while attached and after detach; the ratios of the medians, over ``--repeats``
processes (median and spread). Free of the run-to-run noise that separate processes have on a
shared machine, and of the injection itself (the windows start once it is over).

    python benchmarks/inject_steady.py [--repeats 5] [--seconds 4]
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sofa_top.collectors.agent import AgentCollector, AgentServer
from sofa_top.collectors.inject import inject

TARGET = r"""
import os, sys, time
def spin(n):
    t = 0
    for i in range(n):
        t += i * i % 7
    return t
stop, mark = sys.argv[1], sys.argv[1] + ".mark"
print("READY", flush=True)
res = []
while not os.path.exists(stop):
    c = time.process_time()
    spin(200000)
    res.append(time.process_time() - c)
    if os.path.exists(mark):
        res.append(-1.0)
        os.unlink(mark)
print(repr(res), flush=True)
"""


def one(tmp: Path, seconds: float) -> tuple[float, float]:
    """(attached / before, detached / before) of one process's chunk-CPU medians."""
    stop = tmp / "stop"
    mark = Path(str(stop) + ".mark")
    stop.unlink(missing_ok=True)
    w = subprocess.Popen(
        [sys.executable, "-c", TARGET, str(stop)], stdout=subprocess.PIPE, text=True
    )
    assert w.stdout is not None and w.stdout.readline().startswith("READY")

    def phase() -> None:
        time.sleep(seconds)
        mark.touch()
        while mark.exists():
            time.sleep(0.01)

    phase()  # before
    server = AgentServer()
    r = inject(w.pid, server)
    if r.handshake is None:
        raise SystemExit(f"not injected: {r.reason}")
    halt = threading.Event()
    t = threading.Thread(
        target=AgentCollector(server, handshake=r.handshake).run, args=(lambda s: None, halt)
    )
    t.start()
    time.sleep(1.0)  # the injection and the bootstrap are over before the window starts
    mark.touch()
    while mark.exists():
        time.sleep(0.01)
    phase()  # attached
    halt.set()
    t.join(10)
    server.close()  # the agent detaches
    time.sleep(0.5)
    mark.touch()
    while mark.exists():
        time.sleep(0.01)
    time.sleep(seconds)  # detached
    stop.touch()
    out, _ = w.communicate(timeout=60)
    res = ast.literal_eval(out.strip().splitlines()[-1])
    cuts = [i for i, v in enumerate(res) if v < 0]
    before, _, attached, detached = (
        res[: cuts[0]],
        res[cuts[0] + 1 : cuts[1]],
        res[cuts[1] + 1 : cuts[2]],
        res[cuts[2] + 1 :],
    )
    b = statistics.median(before)
    return statistics.median(attached) / b, statistics.median(detached) / b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one(Path(tmp), a.seconds) for _ in range(a.repeats)]
    for i, (att, det) in enumerate(runs):
        print(
            f"process {i + 1}: attached {100 * (att - 1):+.2f}%, detached {100 * (det - 1):+.2f}%"
        )
    for name, vals in (("attached", [r[0] for r in runs]), ("detached", [r[1] for r in runs])):
        med = statistics.median(vals)
        print(
            f"{name}: chunk CPU vs before, median {100 * (med - 1):+.2f}% "
            f"(min {100 * (min(vals) - 1):+.2f}%, max {100 * (max(vals) - 1):+.2f}%, n={len(vals)})"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
