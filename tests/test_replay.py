"""Replay: the snapshot at a cursor is what the hub would have shown then, rebuilt from the file;
a session still being written replays without blocking its writer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import wait_for
from synthetic_session import CHILD, MAIN_TID, PID, T0, gpu_util, make_session, tree_cpu

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import (
    ProcessSample,
    ProcInfo,
    StackCount,
    StackWindow,
    SystemSample,
)
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.store import SessionStore


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[ReplaySource]:
    path = tmp_path / "run.sofa"
    make_session(path)
    r = ReplaySource(path)
    yield r
    r.stop()


def test_snapshot_at_a_cursor(replay: ReplaySource) -> None:
    at = T0 + 4.58
    s = replay.snapshot_at(at)
    assert s.ts == at and s.started == T0 and not s.recording
    assert (s.target.pid, s.target.name, s.target.cmdline) == (PID, "train", ("python", "train.py"))
    assert s.cpu_count == 8

    # The verdict is the last marker at or before the cursor, rebuilt in full.
    assert s.verdict is not None
    assert (s.verdict.kind, s.verdict.severity, s.verdict.headline) == (
        "input-bound",
        "moderate",
        "input-bound (moderate)",
    )
    assert s.verdict.confidence == 0.8 and s.verdict.evidence.input_fraction == 0.2  # type: ignore[union-attr]
    assert [r.text for r in s.verdict.recommendations] == [
        "add .prefetch(tf.data.AUTOTUNE) after batch()"
    ]

    # History: per-second means up to the cursor, the cursor's second partial.
    cpu = s.history["tree.cpu"]
    assert [t for t, _ in cpu] == [T0 + k for k in range(5)]
    assert cpu[3] == (T0 + 3, pytest.approx(sum(tree_cpu(i) for i in range(30, 40)) / 10))
    assert cpu[4] == (T0 + 4, pytest.approx(sum(tree_cpu(i) for i in range(40, 46)) / 6))
    assert "sys.cpu.1" in s.history and not any(k.startswith("proc.") for k in s.history)

    # The latest samples, reassembled from points and the processes table.
    assert s.process is not None and s.process.ts == T0 + 4.5
    assert s.process.tree_cpu_percent == tree_cpu(45) and s.process.target_alive
    assert s.process.tree_rss == (150 + 45) << 20 and s.process.tree_threads == 7
    procs = {p.pid: p for p in s.process.procs}
    assert set(procs) == {PID, CHILD}
    assert procs[PID].cpu_percent == 135.0 and procs[PID].role == "target"
    assert procs[CHILD].ppid == PID and procs[CHILD].rss == 50 << 20
    assert s.system is not None and s.system.ts == pytest.approx(T0 + 4.55)
    assert s.system.cpu_per_core == (40.0, 65.0) and s.system.mem_total == 16 << 30
    assert s.gpu is not None and s.gpu.devices[0].util == gpu_util(9)

    # Stacks: the windows that ended in the 5 s up to the cursor (T0+1 .. T0+4).
    assert s.stacks is not None
    assert (s.stacks.ts_start, s.stacks.ts_end) == (T0, T0 + 4)
    # the worker's idle samples in its loop wait for work: counted apart from the loop's
    assert s.stacks.thread_samples == 4 * 160 and s.stacks.idle_thread_samples == 4 * 40
    assert set(s.stacks_by_thread) == {MAIN_TID, CHILD}
    main = s.stacks_by_thread[MAIN_TID]
    assert main.split["input"] == pytest.approx(0.3) and main.split["compute"] == pytest.approx(0.7)
    assert s.last_stack_window is not None and s.last_stack_window.ts_end == T0 + 4

    # Events and steps up to the cursor; agent reports are not events to the UI.
    assert [(e.ts, e.kind) for e in s.events] == [(T0 + 2, "verdict")]
    assert [st.step for st in s.steps] == list(range(9))
    assert not s.target_exited and s.exit_code is None


def test_cursor_on_a_marker_and_after_exit(replay: ReplaySource) -> None:
    assert replay.snapshot_at(T0 + 1.0).verdict is None
    at_change = replay.snapshot_at(T0 + 6.0)
    assert at_change.verdict is not None and at_change.verdict.kind == "compute-bound"
    end = replay.snapshot_at(T0 + 9.9)
    assert end.target_exited and end.exit_code == 0
    assert end.process is not None and not end.process.target_alive
    assert [e.kind for e in end.events] == ["verdict", "verdict", "optimize", "target-exit"]
    before = replay.snapshot_at(T0 - 5)
    assert before.process is None and before.stacks is None and before.history == {}


def test_history_keeps_fifteen_minutes(tmp_path: Path) -> None:
    path = tmp_path / "long.sofa"
    store = SessionStore(path)
    store.set_meta(target={"pid": 1, "name": "x", "cmdline": []}, started=T0)
    store.write(
        [ProcessSample(T0 + t, 1, True, (), float(t), 1, 0, 0, 1) for t in range(0, 2000, 50)]
    )
    store.close(ended=T0 + 2000)
    r = ReplaySource(path)
    try:
        cpu = r.snapshot_at(T0 + 1950.5).history["tree.cpu"]
        assert [t - T0 for t, _ in cpu] == list(range(1100, 1951, 50))  # (1950 - 900, 1950]
        assert r.snapshot_at(T0 + 1950.5).stacks is None
    finally:
        r.stop()


def test_history_reuse_matches_fresh_reads(tmp_path: Path) -> None:
    path = tmp_path / "minute.sofa"
    make_session(path, seconds=60)
    walking = ReplaySource(path)
    try:
        # Forward in small and big steps, back, and within one second.
        for at in (20.3, 21.3, 25.7, 40.0, 30.2, 30.9, 59.9, 12.0):
            fresh = ReplaySource(path)
            try:
                assert walking.snapshot_at(T0 + at).history == fresh.snapshot_at(T0 + at).history
            finally:
                fresh.stop()
    finally:
        walking.stop()


def test_stacks_fall_back_to_the_last_window(tmp_path: Path) -> None:
    path = tmp_path / "gap.sofa"
    store = SessionStore(path)
    store.set_meta(target={"pid": 1, "name": "x", "cmdline": []}, started=T0)
    counts = (StackCount(1, 1, "MainThread", (), 10, "idle"),)
    store.write(
        [
            StackWindow(T0, T0 + 1, 10.0, 10, counts),
            ProcessSample(T0 + 60, 1, True, (), 1.0, 1, 0, 0, 1),
        ]
    )
    store.close()
    r = ReplaySource(path)
    try:
        s = r.snapshot_at(T0 + 60)  # no window in the last 5 s: the hub shows the last one
        assert s.stacks is not None and s.stacks.thread_samples == 10
    finally:
        r.stop()


def test_markers_seek_and_step(replay: ReplaySource) -> None:
    rng = replay.time_range
    assert rng is not None and rng == (T0, pytest.approx(T0 + 9.95))
    end = rng[1]
    assert replay.following and replay.cursor == end
    assert replay.seek(T0 - 100) == T0 and not replay.following  # clamped to the recording
    assert replay.next_marker() == T0 + 2
    assert replay.next_marker() == T0 + 6
    assert replay.next_marker() is None and replay.cursor == T0 + 6
    assert replay.prev_marker() == T0 + 2
    assert replay.prev_marker() is None and replay.cursor == T0 + 2
    assert replay.step(1.5) == T0 + 3.5
    assert replay.snapshot().ts == T0 + 3.5
    assert replay.step(1000) == end
    replay.follow()
    assert replay.following


def test_publishes_snapshots_and_stops(replay: ReplaySource) -> None:
    got: list[Snapshot] = []
    seen = threading.Event()

    def on_snapshot(s: Snapshot) -> None:
        got.append(s)
        seen.set()

    replay.interval = 0.05
    replay.start(on_snapshot)
    assert seen.wait(5)
    seen.clear()
    replay.seek(T0 + 3)  # a move publishes at once
    wait_for(lambda: any(s.ts == T0 + 3 for s in got), 60, "the snapshot at the new cursor")
    replay.stop()
    n = len(got)
    # stopped: no more snapshots, over several publishing intervals (a negative check can only
    # wait; 0.2 s is four intervals of 0.05 s)
    time.sleep(4 * replay.interval)
    assert len(got) == n
    replay.stop()  # idempotent


def test_replays_a_session_being_written_without_blocking_it(tmp_path: Path) -> None:
    path = tmp_path / "live.sofa"
    store = make_session(path, seconds=3, close=False)
    r = ReplaySource(path)
    snaps: list[Snapshot] = []
    r.interval = 0.0  # snapshots back to back: the most read pressure a replay can put on it
    r.start(snaps.append)
    slowest = 0.0
    final = T0 + 3 + 39 * 0.1
    try:
        for k in range(40):
            ts = T0 + 3 + k * 0.1
            info = ProcInfo(PID, 1, "python", ("python",), T0 - 5, 1.0, 1, 1, 0, 0, 0, "running")
            t = time.monotonic()
            store.write(
                [
                    ProcessSample(ts, PID, True, (info,), 500.0 + k, 1 << 20, 0, 0, 3),
                    SystemSample(ts, (1.0,), 1.0, 0.0, 1, 2, 0, 0),
                ]
            )
            store.commit()
            slowest = max(slowest, time.monotonic() - t)
            # a read between every two commits: the replay publishes after this one
            n = len(snaps)
            wait_for(lambda: len(snaps) > n, 60, "the replay to read")  # noqa: B023
        wait_for(lambda: bool(snaps) and snaps[-1].ts == final, 60, "the replay at the end")
    finally:
        r.stop()
        store.close()
    # a commit blocked by the reader would wait out the store's 2 s busy timeout (or fail)
    assert slowest < 2.0, slowest
    last = snaps[-1]
    assert last.ts == final  # following the end as it grows
    assert last.process is not None and last.process.tree_cpu_percent == 539.0
    assert last.history["tree.cpu"][-1][0] == T0 + 6
    assert len(snaps) > 5


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such session file"):
        ReplaySource(tmp_path / "nope.sofa")
    junk = tmp_path / "junk.sofa"
    junk.write_bytes(b"\0" * 5000)
    with pytest.raises(UserError):
        ReplaySource(junk)
