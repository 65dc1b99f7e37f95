"""SVG snapshots of the dashboard (pytest-textual-snapshot) with a frozen clock and fixed data.

Regenerate after an intended visual change with ``pytest tests/test_tui_snapshots.py
--snapshot-update`` and look at the SVGs under ``tests/__snapshots__/`` before committing them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from test_tui_home import procs, sessions
from textual.pilot import Pilot
from tui_fakes import (
    PTRACE_ERROR,
    PTRACE_HINT,
    T0,
    FakeSource,
    LaunchSource,
    compute_bound_verdict,
    gpu_loop_snapshot,
    launch_snapshot,
    make_snapshot,
    nvml_gpu,
    phases_snapshot,
)

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.home import HomeApp

SnapCompare = Callable[..., bool]


def scenario(
    snapshot: Snapshot, *keys: str, source: FakeSource | None = None
) -> tuple[DashboardApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    """An app fed ``snapshot`` through a FakeSource, then ``keys`` pressed."""
    source = source if source is not None else FakeSource()
    source.script.append(snapshot)
    app = DashboardApp(source, clock=lambda: snapshot.ts)

    async def run_before(pilot: Pilot[Any]) -> None:
        source.push()
        await pilot.pause()
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
            await pilot.pause()

    return app, run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_no_gpu(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = scenario(make_snapshot(gpus=0))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_recorded_gpu(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = scenario(make_snapshot(gpus=1))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_eight_gpus_160x48(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(make_snapshot(gpus=8, cpu_count=64))
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)


def test_ptrace_denied_and_target_exited_80x24(snap_compare: SnapCompare) -> None:
    snapshot = make_snapshot(
        stack_error=PTRACE_ERROR, stack_hint=PTRACE_HINT, target_exited=True, exit_code=1
    )
    app, run_before = scenario(snapshot)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_paused_zoomed_sorted_80x24(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(make_snapshot(T0 + 400), "p", "z", "s")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_help_screen_80x24(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(make_snapshot(), "question_mark")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_too_small_40x12(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(make_snapshot())
    assert snap_compare(app, terminal_size=(40, 12), run_before=run_before)


# -- launch mode, verdicts, home screen ---------------------------------------------------------

SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])


@SIZES
def test_verdict_panel(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = scenario(launch_snapshot(gpus=1))
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_compute_bound_verdict_80x24(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(launch_snapshot(verdict=compute_bound_verdict()))
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@SIZES
def test_step_timeline(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = scenario(launch_snapshot(), "2")
    assert snap_compare(app, terminal_size=size, run_before=run_before)


def test_steps_phases_160x48(snap_compare: SnapCompare) -> None:
    """Training with an evaluation pass: a phase per row (steps, input wait, p50/p90/p99),
    the compute split, the model-call clock in the title; the verdict about training."""
    app, run_before = scenario(phases_snapshot(), "2")
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)


def test_log_view_80x24(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(launch_snapshot(logs_dropped=12), "3")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_launch_quit_confirmation_80x24(snap_compare: SnapCompare) -> None:
    app, run_before = scenario(launch_snapshot(), "q", source=LaunchSource())
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Session dates render in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@SIZES
def test_home_screen(snap_compare: SnapCompare, size: tuple[int, int], utc: None) -> None:
    app = HomeApp(scan=procs, sessions=sessions)

    async def run_before(pilot: Pilot[Any]) -> None:
        deadline = time.monotonic() + 60
        while not (app.scans and app.sessions_loaded):
            assert time.monotonic() < deadline, "the home screen did not load"
            await pilot.pause(0.05)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def ranks_snapshot() -> Snapshot:
    """A 4-rank DDP job whose rank 2 waits on storage: the ranks pane and the straggler."""
    import dataclasses

    from sofa_top.analysis.ranks import RankEvidence, cross_rank_verdict, rank_stats
    from sofa_top.analysis.verdicts import Evidence
    from sofa_top.datamodel.ranks import RankId
    from sofa_top.datamodel.samples import StepSample

    now = T0 + 75
    evidence = []
    for r in range(4):
        wait, coll = (0.77, 0.2) if r == 2 else (0.01, 0.96)
        steps = [
            StepSample(now - i * 0.041, i, now - (i + 1) * 0.041, 0.041, 0.041 * wait,
                       "torch-dataloader", 8, 5000 + r, 0.0, 0.041 * coll)
            for i in range(200)
        ]  # fmt: skip
        ident = RankId(r, 4, r, 4, 0, "gpu-host")
        evidence.append(RankEvidence(ident, 5000 + r, steps, 30.0, 0.0))
    ranks = rank_stats(evidence, Evidence(cpu_count=8))
    return dataclasses.replace(
        launch_snapshot(), ranks=ranks, rank_verdict=cross_rank_verdict(ranks)
    )


@SIZES
def test_straggler_and_ranks_pane(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, run_before = scenario(ranks_snapshot())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- GPU loops: the verdict, GPU busy per step, NVML per device (recorded backends, NO GPU) ------


@SIZES
def test_gpu_loop(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    """A launch-bound CUDA loop: the verdict's cause, GPU busy, NVML clocks and throttle."""
    app, run_before = scenario(gpu_loop_snapshot())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@SIZES
def test_gpu_loop_steps(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    """The steps view: GPU busy per step under the input-wait / compute bars."""
    app, run_before = scenario(gpu_loop_snapshot(), "2")
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("recording", ["a100_mig.json", "container_foreign_pids.json"])
def test_nvml_device_160x48(snap_compare: SnapCompare, recording: str) -> None:
    """A MIG device's instances; NVML's PIDs of another namespace (device totals stand in)."""
    snapshot = gpu_loop_snapshot()
    gpu = nvml_gpu(snapshot.ts, recording)
    app, run_before = scenario(replace(snapshot, gpu=gpu))
    assert snap_compare(app, terminal_size=(160, 48), run_before=run_before)
