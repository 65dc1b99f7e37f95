"""Pilot tests of the optimizer screen (``o``): toggles, form validation, a fake compare runner."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Button, Checkbox, Input, ProgressBar, Static
from tui_fakes import (
    CMDLINE,
    T0,
    FakeSource,
    compute_bound_verdict,
    gpu_loop_snapshot,
    launch_snapshot,
    make_snapshot,
)

from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions
from sofa_top.collectors.discovery import JobCopy
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.optimizers.compare import (
    CompareResult,
    ConfigResult,
    Diagnosed,
    OnProgress,
    RunFinished,
    RunStarted,
    SearchLevelFinished,
    SearchLevelStarted,
    changes_for,
    plan,
)
from sofa_top.optimizers.headroom import Diagnosis, Headroom
from sofa_top.optimizers.measures import RunOutcome, Throughput
from sofa_top.optimizers.search import SearchResult
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.optimizer_screen import (
    ATTACH_MESSAGE,
    SCREEN_NAME,
    ConfirmCopy,
    OptimizerScreen,
    open_optimizer,
)

SIZE = (100, 30)
OUT = "/home/ml/.local/share/sofa-top/sessions"
RATES = {"baseline": (400.0, 410.0, 395.0), "prefetch": (655.0, 640.0, 662.0)}
# what the agent reports for a tf.data pipeline it parallelized (optimize.py's own wording)
TF_WHERE = [
    "tf.data: map(num_parallel_calls=AUTOTUNE)",
    "tf.data: .prefetch(AUTOTUNE) appended at iteration",
]


def fake_result(cmd: Sequence[str], configs: Sequence[str], repeats: int) -> CompareResult:
    """What ``run_compare`` returns for an input-bound tf.data job: prefetch wins 1.6x."""
    runs = []
    base = sorted(RATES["baseline"][:repeats])[len(RATES["baseline"][:repeats]) // 2]
    for c in configs:
        rates = RATES.get(c, (380.0, 372.0, 391.0))[:repeats]
        sessions = [f"{OUT}/compare-20231114-221320-{c}-{i + 1}.sofa" for i in range(repeats)]
        toggles: list[Any] = {"prefetch": ["prefetch"], "xla": ["xla"]}.get(c, [])
        outcomes = [
            RunOutcome(s, r, "samples/s", 0.4, "input-bound", tuple(toggles), (), (), False, None)
            for s, r in zip(sessions, rates, strict=True)
        ]
        med = sorted(rates)[len(rates) // 2]
        flags = [] if c in ("baseline", "prefetch") else ["slower"]
        runs.append(
            ConfigResult(
                config=c,
                optimize=OptimizeSpec(prefetch=PrefetchOptions()) if c == "prefetch"
                else OptimizeSpec(),
                applied=toggles,
                throughput=Throughput(med, min(rates), max(rates), "samples/s"),
                speedup=med / base,
                verdict="compute-bound" if c == "prefetch" else "input-bound",
                compile_s=None if c != "xla" else 12.5,
                flags=flags,
                where=TF_WHERE if c == "prefetch" else [],
                sessions=sessions,
                parallelism=2 if c == "prefetch" else None,
                headroom=Headroom(682.0, med / 682.0, "samples/s", "cores", 2,
                                  2 if c == "prefetch" else 1, None, None,
                                  f"at {med / 682.0:.0%} of what 2 cores allow"),
                outcomes=outcomes,
            )
        )  # fmt: skip
    diag = Diagnosis(
        "cpu", 0.74, 0.98, 1, 2, 0.0021, 0.0075, 0.0117, 4.0, 300_000_000, None, wait_s=0.0075
    )
    search = SearchResult("cpu", 2, "cpu-bound input: parallelism stays at the core count")
    result = CompareResult(
        list(cmd), repeats, 50, None, 5, runs, "prefetch", [], diagnosis=diag, search=search
    )
    result.changes = changes_for(result, "prefetch")
    return result


class FakeRunner:
    """Stands in for ``run_compare``: reports progress like it does, returns ``fake_result``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.threads: list[int] = []

    def __call__(
        self,
        cmd: Sequence[str],
        configs: Sequence[str] = (),
        repeats: int = 3,
        steps: int | None = 50,
        seconds: float | None = None,
        warmup_steps: int = 5,
        on_progress: OnProgress | None = None,
        out_dir: str | Path | None = None,
        timeout_s: float = 600.0,
        optimize: Any = None,
        *,
        like: Any = None,
    ) -> CompareResult:
        self.calls.append(
            {"cmd": list(cmd), "configs": list(configs), "repeats": repeats, "steps": steps,
             "out_dir": out_dir, "optimize": optimize, "like": like}
        )  # fmt: skip
        self.threads.append(threading.get_ident())
        say = on_progress or (lambda _e: None)
        result = fake_result(cmd, configs, repeats)
        for i in range(repeats):
            for run in result.runs:
                say(RunStarted(run.config, i + 1, repeats, run.sessions[i]))
                say(RunFinished(run.config, i + 1, run.outcomes[i]))
        return result


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


def dashboard(snapshot: Snapshot | None, runner: FakeRunner | None = None) -> DashboardApp:
    app = DashboardApp(FakeSource([snapshot] if snapshot else []), clock=lambda: T0 + 75)
    if runner is not None:
        app.optimizer_runner = runner  # type: ignore[attr-defined]
    return app


async def settle(pilot: Pilot[Any], times: int = 3) -> None:
    for _ in range(times):
        await pilot.pause()


async def open_panel(app: DashboardApp, pilot: Pilot[Any]) -> OptimizerScreen:
    source = app.source
    assert isinstance(source, FakeSource)
    if source.script:
        source.push()
    await settle(pilot)
    await pilot.press("o")
    await settle(pilot)
    screen = app.screen
    assert isinstance(screen, OptimizerScreen)
    return screen


def plain(screen: OptimizerScreen, selector: str) -> str:
    """What a Static shows, as plain text (wide enough that nothing wraps)."""
    console = Console(width=300, record=True, file=None, color_system=None)
    with console.capture() as cap:
        console.print(screen.query_one(selector, Static).content)
    return cap.get()


def test_plan() -> None:
    assert plan([]) == (["baseline"], {})
    assert plan(["prefetch"]) == (["baseline", "prefetch"], {})
    assert plan(["xla", "prefetch"]) == (
        ["baseline", "prefetch", "xla", "prefetch+xla"],
        {"prefetch+xla": OptimizeSpec(xla=True, prefetch=PrefetchOptions())},
    )
    assert plan(["prefetch", "xla", "depth-first"])[0][-1] == "all"


@run_async
async def test_o_opens_the_panel_with_toggles_from_the_verdict() -> None:
    app = dashboard(launch_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.query_one("#opt-prefetch", Checkbox).value is True
        assert screen.query_one("#opt-xla", Checkbox).value is False
        assert screen.query_one("#opt-depth-first", Checkbox).value is False
        assert screen.query_one("#opt-run", Button).disabled is False
        assert screen.query_one("#opt-repeats", Input).value == "3"
        assert screen.query_one("#opt-steps", Input).value == "50"
        assert ATTACH_MESSAGE not in plain(screen, "#opt-status")
        # o again does not stack a second panel; escape goes back to the dashboard
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, OptimizerScreen)
        assert app.screen is app.screen_stack[0]


@run_async
async def test_gpu_toggles_are_offered_only_where_the_workload_uses_cuda() -> None:
    app = dashboard(launch_snapshot())  # a CPU tf.data loop
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert not screen.query("#opt-gpu-toggles") and not screen.query("#opt-bf16")
    app = dashboard(gpu_loop_snapshot())  # launch-bound on CUDA: CUDA graphs recommended
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.query_one("#opt-compile-mode", Checkbox).value is True
        assert screen.query_one("#opt-pin-memory", Checkbox).value is False
        assert screen.query_one("#opt-bf16", Checkbox).value is False
        screen.query_one("#opt-bf16", Checkbox).value = True
        screen.query_one("#opt-depth-first", Checkbox).value = True
        await settle(pilot)
        assert screen.selected() == ["depth-first", "bf16", "compile-mode"]
        # CUDA graphs compile too: depth-first cannot go with them
        assert screen.query_one("#opt-note", Static).has_class("-conflict")
        configs, extra = plan(screen.selected())
        assert configs == [
            "baseline",
            "depth-first",
            "bf16",
            "compile-mode",
            "depth-first+bf16+compile-mode",
        ]
        assert extra["depth-first+bf16+compile-mode"] == OptimizeSpec(
            depth_first=True, bf16=True, compile_mode="reduce-overhead"
        )


@run_async
async def test_compute_bound_verdict_ticks_xla_and_conflict_note() -> None:
    app = dashboard(launch_snapshot(verdict=compute_bound_verdict()))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.query_one("#opt-xla", Checkbox).value is True
        assert screen.query_one("#opt-prefetch", Checkbox).value is False
        note = screen.query_one("#opt-note", Static)
        assert not note.has_class("-conflict")
        screen.query_one("#opt-depth-first", Checkbox).value = True
        await settle(pilot)
        assert note.has_class("-conflict")
        assert "depth-first skipped" in plain(screen, "#opt-note")


COPY = JobCopy(4242, ("python", "train.py", "--epochs", "90"), "/home/ml/run", {"A": "1"})


@run_async
async def test_attached_session_reruns_a_copy_after_a_confirmation() -> None:
    runner = FakeRunner()
    app = dashboard(make_snapshot(launched=False), runner)
    app.optimizer_copier = lambda pid: COPY  # type: ignore[attr-defined]
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert "runs a copy of this job" in plain(screen, "#opt-status")
        assert screen.query_one("#opt-run", Button).disabled is False
        # cancel: nothing runs
        assert screen.start_compare() is True
        await settle(pilot)
        assert isinstance(app.screen, ConfirmCopy)
        text = str(app.screen.query_one("#copy-text", Static).content)
        assert "copy of PID 4242" in text and "/home/ml/run" in text and "may write" in text
        await pilot.press("escape")
        await settle(pilot)
        assert runner.calls == [] and "not confirmed" in plain(screen, "#opt-status")
        # confirm: the copy's command, directory and environment go to compare
        screen.query_one("#opt-prefetch", Checkbox).value = True
        screen.start_compare()
        await settle(pilot)
        await pilot.click("#copy-yes")
        await settle(pilot, 10)
        assert len(runner.calls) == 1
        assert runner.calls[0]["cmd"] == list(COPY.cmd) and runner.calls[0]["like"] is COPY


@run_async
async def test_attached_session_whose_job_cannot_be_copied() -> None:
    runner = FakeRunner()
    app = dashboard(make_snapshot(launched=False), runner)

    def gone(pid: int) -> JobCopy:
        raise UserError(f"no such process: PID {pid}")

    app.optimizer_copier = gone  # type: ignore[attr-defined]
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.start_compare() is False
        await settle(pilot)
        assert "cannot copy the job: no such process" in plain(screen, "#opt-status")
        assert runner.calls == []


@run_async
async def test_run_fills_table_highlights_best_and_shows_changes() -> None:
    runner = FakeRunner()
    app = dashboard(launch_snapshot(), runner)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        await pilot.click("#opt-run")
        await screen.workers.wait_for_complete()
        await settle(pilot, 5)
        assert runner.calls and runner.calls[0]["cmd"] == list(CMDLINE)
        assert runner.calls[0]["configs"] == ["baseline", "prefetch"]
        assert runner.calls[0]["repeats"] == 3 and runner.calls[0]["steps"] == 50
        assert runner.threads[0] != threading.get_ident()  # never on the UI thread
        assert screen.result is not None and screen.result.best == "prefetch"
        assert screen.done_runs == 6
        bar = screen.query_one("#opt-progress", ProgressBar)
        assert bar.total == 6 and bar.progress == 6
        table = plain(screen, "#opt-table")
        assert "★ prefetch" in table
        assert "655.0 (640.0-662.0) samples/s" in table
        assert "1.64x" in table
        assert "96% of 2 cores" in table  # headroom: 655 of the 682 samples/s 2 cores allow
        winner = plain(screen, "#opt-winner")
        assert "best: prefetch: 1.64x — at 96% of what 2 cores allow" in winner
        assert "input cause: cpu, 0.98 cores busy producing input" in winner
        assert "parallelism: 2 (cpu-bound input" in winner
        assert "prefetch(tf.data.AUTOTUNE)" in winner
        assert "compare-20231114-221320-prefetch-1.sofa" in winner
        assert screen.query_one("#opt-run", Button).disabled is False
        # back to the dashboard and o again: the finished comparison is still there
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        assert app.screen is screen and screen.result is not None


@run_async
async def test_live_rows_fill_in_from_progress_events() -> None:
    def outcome(rate: float | None, failed: str | None = None) -> RunOutcome:
        return RunOutcome("/tmp/x.sofa", rate, "samples/s", None, None, (), (), (), False, failed)

    app = dashboard(launch_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        screen.configs = ["baseline", "prefetch"]
        screen.total_runs = 4
        screen._report(RunStarted("baseline", 1, 2, "/tmp/a.sofa"))
        await settle(pilot)
        assert "running" in plain(screen, "#opt-table")
        screen._report(RunFinished("baseline", 1, outcome(400.0)))
        screen._report(Diagnosed(None))
        screen._report(SearchLevelStarted(4, "/tmp/s.sofa"))
        await settle(pilot)
        assert "search parallelism 4" in plain(screen, "#opt-current")
        assert "/tmp/s.sofa" not in plain(screen, "#opt-current")
        screen._report(SearchLevelFinished(4, outcome(910.0)))
        await settle(pilot)
        assert "search p=4: 910.00 samples/s" in plain(screen, "#opt-current")
        assert screen.done_runs == 1  # search runs are not the table's runs
        screen._report(RunStarted("prefetch", 1, 2, "/tmp/b.sofa"))
        screen._report(RunFinished("prefetch", 1, outcome(None, "exit code 1")))
        await settle(pilot)
        table = plain(screen, "#opt-table")
        assert "400.0 (400.0-400.0) samples/s" in table
        assert "1 failed" in table
        assert screen.done_runs == 2


@run_async
async def test_invalid_repeats_is_rejected() -> None:
    runner = FakeRunner()
    app = dashboard(launch_snapshot(), runner)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        screen.query_one("#opt-repeats", Input).value = "0"
        await settle(pilot)
        assert screen.start_compare() is False
        await settle(pilot)
        assert runner.calls == []
        assert "invalid repeats" in plain(screen, "#opt-status")
        screen.query_one("#opt-repeats", Input).value = ""
        assert screen.start_compare() is False
        screen.query_one("#opt-repeats", Input).value = "2"
        screen.query_one("#opt-steps", Input).value = "0"
        assert screen.start_compare() is False
        assert "invalid steps" in plain(screen, "#opt-status")
        assert runner.calls == []


@run_async
async def test_runner_failure_is_shown() -> None:
    def broken(*_a: Any, **_k: Any) -> CompareResult:
        raise RuntimeError("launch failed")

    app = dashboard(launch_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        source = app.source
        assert isinstance(source, FakeSource)
        source.push()
        await settle(pilot)
        open_optimizer(app, broken)
        await settle(pilot)
        screen = app.get_screen(SCREEN_NAME)
        assert isinstance(screen, OptimizerScreen)
        assert screen.start_compare()
        await screen.workers.wait_for_complete()
        await settle(pilot)
        assert "launch failed" in plain(screen, "#opt-status")
        assert not screen.running


@run_async
async def test_palette_offers_the_optimizer() -> None:
    app = dashboard(launch_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Optimizer" in titles


def test_snapshot_filled_table(snap_compare: Any) -> None:
    runner = FakeRunner()
    app = dashboard(launch_snapshot(), runner)

    async def run_before(pilot: Pilot[Any]) -> None:
        screen = await open_panel(app, pilot)
        await pilot.click("#opt-run")
        await screen.workers.wait_for_complete()
        await settle(pilot, 5)
        screen.set_focus(None)
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@run_async
async def test_real_compare_from_the_panel(tmp_path: Path, monkeypatch: Any) -> None:
    """No fake: the panel runs ``run_compare`` on a real launched workload (a plain-Python
    loop, so prefetch cannot apply and says so) and fills the table from real sessions."""
    import sys
    from dataclasses import replace

    monkeypatch.setenv("SOFA_TOP_DATA_DIR", str(tmp_path))
    workload = Path(__file__).parent / "workloads" / "agent_plain.py"
    cmd = (sys.executable, str(workload), "--steps", "1000", "--input-ms", "3", "--compute-ms", "2")
    snap = launch_snapshot()
    snap = replace(snap, target=replace(snap.target, cmdline=cmd))
    app = dashboard(snap)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        screen.query_one("#opt-repeats", Input).value = "1"
        screen.query_one("#opt-steps", Input).value = "15"
        await pilot.click("#opt-run")
        await settle(pilot)
        await screen.workers.wait_for_complete()
        await settle(pilot, 5)
        result = screen.result
        assert result is not None, plain(screen, "#opt-status")
        assert [r.config for r in result.runs] == ["baseline", "prefetch"]
        base, pre = result.runs
        assert base.throughput.median and base.throughput.median > 0
        assert pre.not_applied and "prefetch" in dict(pre.not_applied)
        for r in result.runs:
            assert all(Path(s).is_file() for s in r.sessions)  # each run is a session
        table = plain(screen, "#opt-table")
        assert f"{base.throughput.median:.1f}" in table
        assert "not applied" in table or "toggle-not-applied" in table


@run_async
async def test_only_toggles_that_apply_are_ticked_and_the_others_say_why() -> None:
    from dataclasses import replace

    from sofa_top.datamodel.verdict import Recommendation
    from sofa_top.datamodel.workload import ModelReport

    # a TensorFlow job whose (older) verdict still offered depth-first: never ticked for TF
    old = compute_bound_verdict()
    old = replace(
        old, recommendations=(*old.recommendations, Recommendation("depth_first", "depth_first"))
    )
    app = dashboard(launch_snapshot(verdict=old))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.query_one("#opt-xla", Checkbox).value is True
        assert screen.query_one("#opt-depth-first", Checkbox).value is False
        assert screen.query_one("#opt-threads", Checkbox).value is False
        note = plain(screen, "#opt-note")
        assert "depth-first: not offered for TensorFlow" in note
        assert "threads: the thread pools do not outnumber" in note
        assert "prefetch: compute-bound: the loop does not wait for its input" in note
    # a torch LSTM: no chain for depth-first, and the panel says so
    lstm = ModelReport("torch", "LSTMLM", "__main__", 10, 0, "", 1)
    snap = replace(launch_snapshot(verdict=old), model=lstm, pipeline=None)
    app = dashboard(snap)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        assert screen.query_one("#opt-depth-first", Checkbox).value is False
        assert "LSTMLM has no chain of memory-bound layers" in plain(screen, "#opt-note")
