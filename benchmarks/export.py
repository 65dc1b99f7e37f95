"""Export benchmark: a synthetic 1-hour session, exported to every format.

The session: process and system samples at 10 Hz (15 series: tree CPU/RSS/IO/threads, two
processes' CPU/RSS, system CPU/iowait/memory/swap and two cores), GPU at 2 Hz (6 series), Python
stacks at 100 Hz in 1 s windows for three threads (about 1.1 M thread-samples), 10 steps/s and a
verdict change every five minutes.

Each export runs in its own subprocess, so its peak RSS (``ru_maxrss``) is its own; a second run
under ``tracemalloc`` gives the peak of Python allocations. The target is <= 3 s per format.

Usage: ``python benchmarks/export.py [--minutes N] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from sofa_top.datamodel.samples import (
    Event,
    Frame,
    GpuDevice,
    GpuSample,
    ProcessSample,
    ProcInfo,
    Sample,
    StackClass,
    StackCount,
    StackWindow,
    StepSample,
    SystemSample,
)
from sofa_top.recording.store import SessionStore

T0 = 1_700_000_000.0
PID, WORKER = 5000, 5001
TARGET_S = 3.0


def _stacks(rng: random.Random, n: int) -> list[tuple[tuple[Frame, ...], StackClass]]:
    """A pool of plausible training-loop stacks (depth 15-35) and their classes."""
    base = [Frame("<module>", "/w/train.py", 200), Frame("main", "/w/train.py", 180)]
    pool: list[tuple[tuple[Frame, ...], StackClass]] = []
    for i in range(n):
        depth = rng.randint(13, 33)
        frames = base + [
            Frame(
                f"fn_{rng.randint(0, 400)}",
                f"/lib/mod_{rng.randint(0, 40)}.py",
                rng.randint(1, 900),
            )
            for _ in range(depth)
        ]
        klass: StackClass = ("input", "compute", "python")[i % 3]
        pool.append((tuple(frames), klass))
    return pool


def synthesize(path: Path, minutes: float) -> None:
    """Write the benchmark session to ``path``."""
    rng = random.Random(1)
    seconds = int(minutes * 60)
    pool = _stacks(rng, 300)
    idle = (
        Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 995),
        Frame("wait", "/usr/lib/python3.11/threading.py", 320),
    )
    store = SessionStore(path)
    store.set_meta(
        mode="record",
        target={"pid": PID, "name": "train", "cmdline": ["python", "train.py"]},
        started=T0,
        cpu_count=2,
    )
    batch: list[Sample] = []
    for sec in range(seconds):
        for tenth in range(10):
            ts = T0 + sec + tenth / 10
            i = sec * 10 + tenth
            procs = (
                ProcInfo(
                    PID,
                    1,
                    "python",
                    ("python", "train.py"),
                    T0,
                    95.0,
                    12,
                    2 << 30,
                    i * 4096,
                    0,
                    i,
                    "running",
                    role="target",
                ),
                ProcInfo(
                    WORKER,
                    PID,
                    "python",
                    ("python",),
                    T0,
                    40.0,
                    2,
                    1 << 30,
                    0,
                    0,
                    i,
                    "running",
                    role="DataLoader worker",
                ),
            )
            batch.append(
                ProcessSample(
                    ts, PID, True, procs, 135.0 + rng.random(), 3 << 30, i * 4096, i * 512, 14
                )
            )
            batch.append(SystemSample(ts, (70.0, 60.0), 65.0, 1.0, 8 << 30, 16 << 30, 0, 0))
            if tenth % 5 == 0:
                batch.append(
                    GpuSample(
                        ts,
                        "ok",
                        (
                            GpuDevice(
                                0,
                                "H200",
                                60.0 + rng.random() * 30,
                                40 << 30,
                                140 << 30,
                                400.0,
                                60.0,
                                1980.0,
                                38 << 30,
                            ),
                        ),
                    )
                )
            start = ts
            batch.append(
                StepSample(
                    start + 0.1,
                    i,
                    start,
                    0.1,
                    0.02 + 0.03 * rng.random(),
                    "torch-dataloader",
                    64,
                    PID,
                )
            )
        picks = rng.sample(pool, 4)
        counts = [40, 30, 20, 10]
        stacks = [
            StackCount(PID, 0x7F00_0000_0000 + 1, "MainThread", f, c, k)
            for (f, k), c in zip(picks, counts, strict=True)
        ]
        stacks.append(StackCount(PID, 0x7F00_0000_0000 + 2, "pin_memory", idle, 100, "idle"))
        w_picks = rng.sample(pool, 2)
        stacks += [StackCount(WORKER, WORKER, "MainThread", f, 50, k) for f, k in w_picks]
        batch.append(StackWindow(T0 + sec, T0 + sec + 1, 100.0, 100, tuple(stacks), 3.0))
        if sec % 300 == 150:
            kind = ("input-bound", "compute-bound")[(sec // 300) % 2]
            batch.append(Event(T0 + sec, "verdict", kind, {"kind": kind, "headline": kind}))
        if len(batch) > 20_000:
            batch.sort(key=lambda s: s.ts)
            store.write(batch)
            store.commit()
            batch = []
    batch.sort(key=lambda s: s.ts)
    store.write(batch)
    store.close(ended=T0 + seconds, end_reason="duration reached")


def child(fmt: str, session: Path, out: Path, trace_alloc: bool) -> None:
    """Run one export and print its measurements as JSON (in a fresh process); ``none`` only
    imports what an export imports, for the baseline."""
    from sofa_top.export import export_session
    from sofa_top.export.perfetto import write_perfetto  # noqa: F401 - loads the protos

    result: dict[str, object] = {
        "seconds": 0.0,
        "cpu_seconds": 0.0,
        "events": 0,
        "bytes": 0,
        "notes": [],
    }
    if fmt != "none":
        if trace_alloc:
            tracemalloc.start()
        t, c = time.perf_counter(), time.process_time()
        res = export_session(session, fmt, out)
        result = {
            "seconds": time.perf_counter() - t,
            "cpu_seconds": time.process_time() - c,
            "events": res.events,
            "bytes": res.bytes,
            "notes": res.notes,
        }
        if trace_alloc:
            result["peak_alloc"] = tracemalloc.get_traced_memory()[1]
    result["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result))


@dataclass
class Measured:
    seconds: float
    cpu_seconds: float
    events: int
    bytes: int
    notes: list[str]
    maxrss_kib: int
    peak_alloc: int = 0


def _run_child(*args: str) -> Measured:
    p = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    return Measured(**json.loads(p.stdout.strip().splitlines()[-1]))


def _calibrate() -> float:
    """CPU seconds of a fixed pure-Python loop: how fast this machine runs Python right now."""
    c = time.process_time()
    sum(i * i for i in range(3_000_000))
    return time.process_time() - c


def main() -> int:
    """Synthesize the session, export it to each format and print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--keep", type=Path, help="keep the session and exports in this directory")
    ap.add_argument("--child", nargs=3, metavar=("FMT", "SESSION", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--trace-alloc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fmt, session, out = args.child
        child(fmt, Path(session), Path(out), args.trace_alloc)
        return 0

    with tempfile.TemporaryDirectory(prefix="sofa-bench-") as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        session = d / "bench.sofa"
        session.unlink(missing_ok=True)
        t = time.perf_counter()
        synthesize(session, args.minutes)
        print(
            f"synthesized a {args.minutes:g} min session in {time.perf_counter() - t:.1f} s: "
            f"{session.stat().st_size / 2**20:.1f} MiB"
        )
        base = _run_child("none", str(session), str(d / "none"))
        print(
            f"baseline (interpreter and imports, no export): peak RSS {base.maxrss_kib >> 10} MiB"
        )
        print(
            f"{'format':<11} {'wall s':>6} {'cpu s':>6} {'events':>10} {'MiB out':>8} "
            f"{'peak RSS':>9} {'py peak':>9}  notes"
        )
        ok = True
        for fmt in ("perfetto", "chrome", "speedscope"):
            out = d / f"bench.{fmt}"
            r = _run_child(fmt, str(session), str(out))
            a = _run_child(fmt, str(session), str(out), "--trace-alloc")
            ok = ok and r.seconds <= TARGET_S
            print(
                f"{fmt:<11} {r.seconds:>6.2f} {r.cpu_seconds:>6.2f} {r.events:>10,} "
                f"{r.bytes / 2**20:>8.1f} {r.maxrss_kib >> 10:>5} MiB {a.peak_alloc / 2**20:>5.1f} "
                f"MiB  {'; '.join(r.notes) or '-'}"
            )
        print(f"target <= {TARGET_S:g} s per format: {'met' if ok else 'NOT met'}")
        print(
            f"(this machine: {_calibrate():.2f} s CPU for a loop that takes ~0.17 s on an idle, "
            "current x86 core; scale the CPU seconds by that ratio to compare machines)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
