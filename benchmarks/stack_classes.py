"""What each way of telling native compute from Python costs, and what it sees.

py-spy's raw output has no per-sample GIL flag, so sofa-top can tell "user code running Python"
from "user code inside a torch kernel" three ways; this prints, for each, py-spy's own CPU per
second of sampling, the workload's slowdown, and the share of the main thread's samples that
ends up ``python`` on a loop whose time is ``torch.mm`` called from a user ``forward``
(``tests/workloads/loop_shapes_torch.py --shape mm``; truth: nearly none is Python):

* ``frames``: the main ``record --idle --nonblocking`` run alone (classes from frames only);
* ``frames+gil``: plus a concurrent ``record --gil --nonblocking`` run (what the collector
  does: ``sofa_top.collectors.gil``);
* ``native``: ``record --idle --native`` (it cannot run ``--nonblocking``: it pauses the target
  at each sample to unwind its native stack).

Each configuration samples the same workload for ``--seconds`` at ``--rate``, interleaved over
``--repeats``; the slowdown is the workload's iterations per second against a run with no
sampler. Usage::

    python benchmarks/stack_classes.py [--repeats 3] [--seconds 6] [--rate 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE.parent / "tests" / "workloads" / "loop_shapes_torch.py"

sys.path.insert(0, str(HERE.parent))

from sofa_top.analysis.classify import classify_stack, reconcile_gil  # noqa: E402
from sofa_top.collectors.pyspy_raw import parse_raw  # noqa: E402
from sofa_top.collectors.stacks import find_pyspy  # noqa: E402
from sofa_top.datamodel.samples import StackCount  # noqa: E402

CONFIGS = ("none", "frames", "frames+gil", "native")


def _spy(pyspy: str, pid: int, seconds: int, rate: int, flags: list[str], out: Path) -> list[str]:
    return [
        pyspy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate),
        "--format", "raw", "--threads", *flags, "-o", str(out),
    ]  # fmt: skip


def one(config: str, seconds: int, rate: int, workdir: Path) -> tuple[float, float, float | None]:
    """(iterations/s, py-spy CPU s per sampled second, python share of the main thread)."""
    pyspy = find_pyspy()
    assert pyspy is not None, "py-spy is not installed"
    w = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--shape", "mm", "--seconds", str(seconds + 2)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert w.stdout is not None
    w.stdout.readline()  # LOOP_STARTED
    time.sleep(0.5)
    main, gil = workdir / "main.txt", workdir / "gil.txt"
    procs: list[subprocess.Popen[bytes]] = []
    if config != "none":
        flags = ["--idle", "--native"] if config == "native" else ["--idle", "--nonblocking"]
        procs.append(subprocess.Popen(_spy(pyspy, w.pid, seconds, rate, flags, main), **_quiet()))
    if config == "frames+gil":
        flags = ["--gil", "--nonblocking"]
        procs.append(subprocess.Popen(_spy(pyspy, w.pid, seconds, rate, flags, gil), **_quiet()))
    cpu = 0.0
    for p in procs:
        _, _, ru = os.wait4(p.pid, 0)
        cpu += ru.ru_utime + ru.ru_stime
    out, _ = w.communicate()
    iterations = int(next(x for x in out.split() if x.startswith("ITERATIONS=")).split("=")[1])
    rate_its = iterations / (seconds + 2)
    if config == "none":
        return rate_its, 0.0, None
    return (
        rate_its,
        cpu / seconds,
        _python_share(main, gil if config == "frames+gil" else None, w.pid, rate * seconds),
    )


def _quiet() -> dict[str, object]:
    return {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def _python_share(main: Path, gil: Path | None, pid: int, instants: int) -> float:
    stacks = [
        StackCount(pid, r.tid or 0, r.thread_name, r.frames, r.count, classify_stack(r.frames))
        for r in parse_raw(main.read_text())
        if r.thread_name == "MainThread"
    ]
    if gil is not None:
        held = sum(r.count for r in parse_raw(gil.read_text()) if r.thread_name == "MainThread")
        stacks = list(reconcile_gil(stacks, held / max(1, instants - 1)))
    total = sum(s.count for s in stacks)
    return sum(s.count for s in stacks if s.klass == "python") / total if total else 0.0


def _fmt(values: list[float], pct: bool = False) -> str:
    med = statistics.median(values)
    if pct:
        return f"{med:.1%} ({min(values):.1%} .. {max(values):.1%})"
    return f"{med:.3f} ({min(values):.3f} .. {max(values):.3f})"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--rate", type=int, default=50)
    a = p.parse_args()
    results: dict[str, list[tuple[float, float, float | None]]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            for config in CONFIGS:  # interleaved: A B C D A B C D ...
                results[config].append(one(config, a.seconds, a.rate, Path(tmp)))
                print(f"repeat {r + 1} {config}: {results[config][-1]}", file=sys.stderr)
    base = statistics.median(its for its, _, _ in results["none"])
    print(f"loop_shapes_torch.py --shape mm, {a.rate} Hz, {a.seconds} s, {a.repeats} repeats")
    print(f"{'config':<12} {'slowdown':<28} {'py-spy CPU s/s':<26} python share")
    for config in CONFIGS[1:]:
        rows = results[config]
        slow = [base / its - 1.0 for its, _, _ in rows]
        cpu = [c for _, c, _ in rows]
        py = [s for _, _, s in rows if s is not None]
        print(f"{config:<12} {_fmt(slow, True):<28} {_fmt(cpu):<26} {_fmt(py, True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
