"""A day of profiling in seconds: the real ``Session`` hub, ``SessionStore`` (SQLite, WAL) and
snapshot builder, fed by a synthetic collector whose clock advances ``--tick`` simulated
seconds per tick. Only the clock is synthetic: every sample goes the production path.

What one tick carries (a DataLoader-style training job): a process sample of the target and
4 workers (renewed every simulated minute, like non-persistent DataLoader workers: new PIDs,
new per-process series), a system sample, 4 agent steps, one output line, and every other tick
a stack window (8 of 50 distinct 20-deep stacks). Snapshots are built every 50 ms, as the
dashboard would ask for them.

Back-pressure: the collector waits while more than 2,000 samples are queued, so nothing is
dropped for being faster than real time. Prints one JSON line: ``rss_mib`` (one reading per
simulated hour, after a GC), ``dropped``, ``covered_h`` (hours the file covers), ``snapshots``.

Usage: ``python day_in_seconds.py [--hours 24] [--tick 5]``
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from sofa_top.collectors.base import Emit
from sofa_top.datamodel.samples import (
    Event,
    Frame,
    ProcessSample,
    ProcInfo,
    Sample,
    StackCount,
    StackWindow,
    StepSample,
    SystemSample,
)
from sofa_top.datamodel.snapshot import Snapshot, TargetInfo
from sofa_top.recording.hub import Session
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.series import SeriesPoint
from sofa_top.recording.store import SessionStore

TARGET = 4242
WORKERS = 4
STACKS = [
    tuple(Frame(f"layer_{d}", f"model_{k % 7}.py", 10 * d + k) for d in range(20))
    for k in range(50)
]


class CountingStore(SessionStore):
    """The real store, counting what the hub has written (for back-pressure)."""

    written = 0

    def write(self, samples: Iterable[Sample]) -> list[list[SeriesPoint]]:
        batch = list(samples)
        self.written += len(batch)
        return super().write(batch)  # the hub feeds its rings the points the store derived


class DayCollector:
    """Emits ``hours`` of samples on a synthetic clock; measures RSS every simulated hour."""

    name = "day"

    def __init__(self, hours: int, tick_s: float, store: CountingStore) -> None:
        self.hours = hours
        self.tick_s = tick_s
        self.store = store
        self.emitted = 0
        self.rss_mib: list[float] = []

    def _emit(self, emit: Emit, sample: Sample) -> None:
        emit(sample)
        self.emitted += 1

    def _catch_up(self, backlog: int) -> None:
        while self.emitted - self.store.written > backlog:
            time.sleep(0.002)

    def run(self, emit: Emit, stop: threading.Event) -> None:
        ticks_per_hour = round(3600 / self.tick_s)
        start = time.time() - self.hours * 3600
        me = psutil.Process()
        for tick in range(self.hours * ticks_per_hour):
            if stop.is_set():
                return
            ts = start + tick * self.tick_s
            generation = int(tick * self.tick_s // 60)  # new worker PIDs every minute
            for s in self._tick(tick, ts, generation):
                self._emit(emit, s)
            self._catch_up(2000)
            if tick % ticks_per_hour == ticks_per_hour - 1:
                self._catch_up(0)
                gc.collect()
                self.rss_mib.append(me.memory_info().rss / 2**20)

    def _tick(self, tick: int, ts: float, generation: int) -> list[Sample]:
        workers = [TARGET + 1 + generation * WORKERS + i for i in range(WORKERS)]
        procs = [_proc(TARGET, 0, "python", "target", 95.0)]
        procs += [_proc(p, TARGET, "pt_data_worker", "DataLoader worker", 40.0) for p in workers]
        out: list[Sample] = [
            ProcessSample(
                ts=ts,
                target_pid=TARGET,
                target_alive=True,
                procs=tuple(procs),
                tree_cpu_percent=255.0,
                tree_rss=5 * 2**30,
                tree_read_bytes=tick * 10**6,
                tree_write_bytes=tick * 10**4,
                tree_threads=48,
            ),
            SystemSample(
                ts=ts,
                cpu_per_core=(80.0, 75.0),
                cpu_total=77.5,
                iowait=1.0,
                mem_used=12 * 2**30,
                mem_total=32 * 2**30,
                swap_used=0,
                swap_total=0,
            ),
            Event(ts, "log", f"epoch {tick // 720} step {tick * 4} loss {1 / (1 + tick):.6f}"),
        ]
        for i in range(4):
            end = ts + (i + 1) * self.tick_s / 4
            out.append(
                StepSample(
                    ts=end,
                    step=tick * 4 + i,
                    start=end - self.tick_s / 4,
                    duration_s=self.tick_s / 4,
                    input_wait_s=0.3 * self.tick_s / 4,
                    source="torch-dataloader",
                    batch_size=64,
                    pid=TARGET,
                )
            )
        if tick % 2 == 0:
            counts = tuple(
                StackCount(TARGET, 1, "MainThread", STACKS[(tick + k) % len(STACKS)], 10, "compute")
                for k in range(8)
            )
            out.append(StackWindow(ts + 0, ts + 2, 40.0, 80, stacks=counts, sampler_cpu=1.5))
        return out


def _proc(pid: int, ppid: int, name: str, role: str, cpu: float) -> ProcInfo:
    return ProcInfo(
        pid=pid,
        ppid=ppid,
        name=name,
        cmdline=(name, "train.py", "--epochs", "1000"),
        create_time=1_700_000_000.0 + pid,
        cpu_percent=cpu,
        num_threads=12,
        rss=2**30,
        read_bytes=0,
        write_bytes=0,
        ctx_switches=1000,
        state="running",
        role=role,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--tick", type=float, default=5.0, help="simulated seconds per tick")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sofa-top-day-") as tmp:
        path = Path(tmp) / "day.sofa"
        store = CountingStore(path)
        collector = DayCollector(args.hours, args.tick, store)
        target = TargetInfo(pid=TARGET, name="python", cmdline=("python", "train.py"))
        session = Session(target, [collector], store, mode="record", snapshot_interval=0.05)
        snapshots = 0

        def on_snapshot(_snapshot: Snapshot) -> None:
            nonlocal snapshots
            snapshots += 1

        session.start(on_snapshot)
        while len(collector.rss_mib) < args.hours and not session.done:
            time.sleep(0.05)
        session.stop("day over")
        reader = SessionReader(path)
        span = reader.time_range() or (0.0, 0.0)
        result = {
            "rss_mib": [round(v, 2) for v in collector.rss_mib],
            "dropped": session.dropped,
            "covered_h": (span[1] - span[0]) / 3600,
            "snapshots": snapshots,
            "steps": reader.count_steps(),
        }
        reader.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
