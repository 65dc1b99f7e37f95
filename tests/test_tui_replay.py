"""Replay in the dashboard: a real ``ReplaySource`` over a session synthesized with
``SessionStore``; the cursor moves with ←/→ (shift: 10 s) and [ / ], every pane follows it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tui_pilot import run_async, table_rows, wait_for
from textual.pilot import Pilot

from sofa_top.datamodel.evidence_json import parse_evidence
from sofa_top.datamodel.samples import (
    Event,
    Frame,
    ProcessSample,
    ProcInfo,
    Sample,
    StackCount,
    StackWindow,
    StepSample,
)
from sofa_top.datamodel.verdict import Recommendation, Verdict
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.store import SessionStore
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.confirm_quit import ConfirmQuitScreen

T0 = 1_700_000_000.0
PID = 4242
SECONDS = 60
INPUT_UNTIL = 30  # the first 30 s wait for input, the rest compute
MARKERS = (T0 + 5, T0 + 32)
SIZE = (120, 36)

INPUT_VERDICT = Verdict(
    "input-bound",
    0.9,
    "input-bound: 70% of each step waits for input",
    parse_evidence("input-bound", {"input_fraction": 0.7}),
    (Recommendation("DataLoader(num_workers=2, persistent_workers=True)", "prefetch"),),
    severity="high",
)
COMPUTE_VERDICT = Verdict(
    "compute-bound",
    0.9,
    "compute-bound: only 3% of each step waits",
    parse_evidence("compute-bound", {"input_fraction": 0.03}),
)


def write_session(path: Path) -> None:
    """A launched torch job: input-bound for 30 s, compute-bound after; two verdict markers."""
    store = SessionStore(path)
    store.set_meta(
        mode="launch",
        target={"pid": PID, "name": "train", "cmdline": ["python", "train.py"]},
        started=T0,
        cpu_count=4,
        mem_total=16 << 30,
    )
    samples: list[Sample] = []
    for i in range(2 * SECONDS + 1):
        t = T0 + i * 0.5
        cpu = 100.0 if t < T0 + INPUT_UNTIL else 390.0
        proc = ProcInfo(
            PID, 1, "python", ("python", "train.py"), T0, cpu, 8, 1 << 30, 0, 0, 0, "running"
        )
        samples.append(ProcessSample(t, PID, True, (proc,), cpu, 1 << 30, 0, 0, 8))
    for k in range(SECONDS):
        input_phase = k < INPUT_UNTIL
        frames = (
            Frame("main", "/w/train.py", 10),
            Frame("load_batch" if input_phase else "matmul_kernel", "/w/train.py", 20),
        )
        count = StackCount(
            PID, PID, "MainThread", frames, 100, "input" if input_phase else "compute"
        )
        samples.append(StackWindow(T0 + k, T0 + k + 1, 100.0, 100, (count,)))
    for k in range(2 * SECONDS):
        end = T0 + (k + 1) * 0.5
        wait = 0.35 if end <= T0 + INPUT_UNTIL else 0.01
        samples.append(StepSample(end, k, end - 0.5, 0.5, wait, "torch-dataloader", 32, PID))
    for ts, verdict in zip(MARKERS, (INPUT_VERDICT, COMPUTE_VERDICT), strict=True):
        samples.append(Event(ts, "verdict", verdict.headline, verdict.as_json()))
    store.write(samples)
    store.close(ended=T0 + SECONDS, end_reason="user quit")


@pytest.fixture
def replay(tmp_path: Path) -> Iterator[ReplaySource]:
    path = tmp_path / "train.sofa"
    write_session(path)
    source = ReplaySource(path)
    yield source
    source.stop()


def at(app: DashboardApp, ts: float) -> bool:
    return app.shown is not None and abs(app.shown.ts - ts) < 1e-6


async def cursor_to(pilot: Pilot[str], app: DashboardApp, ts: float, *keys: str) -> None:
    await pilot.press(*keys)
    await wait_for(lambda: at(app, ts))
    await pilot.pause()


def header(app: DashboardApp) -> str:
    return app.header.render().plain


def verdict(app: DashboardApp) -> str:
    return app.verdict.render().plain


def top_function(app: DashboardApp) -> str:
    return table_rows(app)[0][0]


@run_async
async def test_replay_scrubs_and_jumps_between_verdict_changes(replay: ReplaySource) -> None:
    app = DashboardApp(replay, refresh_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        end = T0 + SECONDS
        await wait_for(lambda: at(app, end))  # it opens at the end of the recording
        await wait_for(lambda: "/ 1:00" in header(app))
        assert "◆ REPLAY" in header(app) and "at 1:00 / 1:00" in header(app)
        assert "● REC" not in header(app)
        assert "COMPUTE-BOUND" in verdict(app)
        assert top_function(app) == "matmul_kernel"

        await cursor_to(pilot, app, MARKERS[1], "left_square_bracket")
        assert "COMPUTE-BOUND" in verdict(app) and "at 0:32" in header(app)
        await cursor_to(pilot, app, MARKERS[0], "left_square_bracket")
        assert "INPUT-BOUND · high" in verdict(app)
        assert "DataLoader(num_workers=2" in verdict(app)
        assert top_function(app) == "load_batch"  # stacks of the window at the cursor
        assert "at 0:05" in header(app)

        await cursor_to(pilot, app, MARKERS[1], "right_square_bracket")
        await cursor_to(pilot, app, MARKERS[1] - 1, "left")  # 1 s back: before the change
        assert "INPUT-BOUND" in verdict(app)
        assert top_function(app) == "load_batch"
        await cursor_to(pilot, app, MARKERS[1] + 9, "shift+right")  # 10 s on
        assert "COMPUTE-BOUND" in verdict(app) and "at 0:41" in header(app)
        assert top_function(app) == "matmul_kernel"
        assert app.shown is not None and app.shown.steps[-1].ts <= MARKERS[1] + 9

        # No later change: the cursor stays and the user is told.
        await pilot.press("right_square_bracket")
        await wait_for(
            lambda: any("no later verdict change" in n.message for n in app._notifications)
        )
        assert at(app, MARKERS[1] + 9)


@run_async
async def test_replay_is_read_only_and_quits_without_asking(replay: ReplaySource) -> None:
    app = DashboardApp(replay, refresh_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.shown is not None)
        assert app.shown is not None and app.shown.target.launched  # a launch-mode recording
        shown = {ab.binding.key for ab in app.active_bindings.values() if ab.binding.show}
        assert {"left", "right", "left_square_bracket", "right_square_bracket"} <= shown
        assert "p" not in shown
        await pilot.press("p")
        assert not app.paused  # nothing to pause in a recording
        await pilot.press("q")  # recorded: nothing runs, nothing to confirm
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmQuitScreen)
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == str(replay.path)


@run_async
async def test_cursor_clamps_at_the_start(replay: ReplaySource) -> None:
    app = DashboardApp(replay, refresh_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.shown is not None)
        for _ in range(8):  # 80 s back from the end of a 60 s recording
            await pilot.press("shift+left")
        start = replay.time_range
        assert start is not None
        await wait_for(lambda: at(app, start[0]))
        assert "at 0:00" in header(app)
        assert "no verdict at this point" in verdict(app)
        await pilot.press("left_square_bracket")
        await wait_for(
            lambda: any("no earlier verdict change" in n.message for n in app._notifications)
        )


@run_async
async def test_replay_keys_do_nothing_live() -> None:
    from tui_fakes import FakeSource, make_snapshot

    source = FakeSource([make_snapshot()])
    app = DashboardApp(source, refresh_s=0.0)
    async with app.run_test(size=SIZE) as pilot:
        source.push()
        await pilot.pause()
        assert not app.replay
        actions = {ab.binding.action.split("(")[0] for ab in app.active_bindings.values()}
        assert "zoom" in actions
        assert not actions & {"scrub", "marker", "follow"}
        app.stacks.table.focus()
        await pilot.press("down", "left", "right_square_bracket")  # the table keeps its arrows
        assert app.stacks.table.cursor_row == 1
        assert "REPLAY" not in header(app)


@run_async
async def test_steps_and_log_views_in_a_replay(replay: ReplaySource) -> None:
    app = DashboardApp(replay, refresh_s=1.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.shown is not None)
        await cursor_to(pilot, app, MARKERS[0], "left_square_bracket", "left_square_bracket")
        await cursor_to(pilot, app, MARKERS[0] + 10, "shift+right")
        await pilot.press("2")
        await pilot.pause()
        summary = app.steps.summary.render().plain
        # Steps up to the cursor (T0 + 15): 0.5 s each, 0.35 s of it waiting for input.
        assert "2.00 steps/s" in summary and "input wait 70%" in summary and "step 29" in summary
        await pilot.press("3")
        await pilot.pause()
        assert "not shown in a replay" in str(app.log_pane.status.render())
