"""Pilot tests of the dashboard: snapshots arrive as messages and the keys do what they say."""

from __future__ import annotations

import asyncio
import functools
import io
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import DataTable, Select, Static
from tui_fakes import (
    BUSY_FUNCTION,
    PIN_TID,
    PTRACE_ERROR,
    PTRACE_HINT,
    SESSION_PATH,
    T0,
    FakeSource,
    functions,
    make_snapshot,
)

from sofa_top.datamodel.samples import GpuSample
from sofa_top.datamodel.snapshot import FunctionStat, Snapshot, TargetInfo
from sofa_top.tui.app import DashboardApp, exit_banner
from sofa_top.tui.formatting import (
    cmdline_text,
    human_bytes,
    human_duration,
    human_rate,
    truncate_left,
)
from sofa_top.tui.help_screen import HelpScreen
from sofa_top.tui.sparkline import resample
from sofa_top.tui.split_bar import split_bar
from sofa_top.tui.stacks_panel import sort_functions
from sofa_top.tui.timelines import TimelineBody, build_rows

SIZE = (100, 32)


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


def plain(renderable: RenderableType, width: int = 120) -> str:
    """What a rich renderable prints as, without styles."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def make_app(source: FakeSource, refresh_s: float = 0.0) -> DashboardApp:
    # refresh_s=0: every snapshot draws at once, so a test never waits on the redraw throttle.
    return DashboardApp(source, refresh_s=refresh_s, clock=lambda: T0 + 75)


async def deliver(pilot: Pilot[str], source: FakeSource, snapshot: Snapshot | None = None) -> None:
    """Push a snapshot through the source's thread and wait until the app has it on screen
    (unless paused): a burst is drawn after the app's draw interval, which a busy machine can
    stretch past any fixed number of pauses."""
    snap = source.push(snapshot)
    await drawn(pilot, snap)


async def drawn(pilot: Pilot[str], snap: Snapshot, timeout: float = 30.0) -> None:
    """Wait until the dashboard received ``snap`` and, unless paused, drew it."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    while True:
        await pilot.pause()
        if not isinstance(app, DashboardApp):
            return
        if app.latest is not snap and app.latest is not None and app.shown is app.latest:
            return  # a later snapshot already replaced it (the source's own)
        if app.latest is snap and (app.paused or app.shown is snap or app.replay):
            await pilot.pause()
            return
        assert time.monotonic() < deadline, "the snapshot was never drawn"


async def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``predicate`` on the running loop (the app may be exiting, so no pilot calls)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _hits(app: DashboardApp) -> int:
    """How many commands the open command palette lists."""
    return sum(c.option_count for c in app.screen.query(CommandList))


def table_rows(app: DashboardApp) -> list[list[str]]:
    table: DataTable[Text | str] = app.stacks.table
    return [
        [cell.plain if isinstance(cell, Text) else str(cell) for cell in table.get_row_at(i)]
        for i in range(table.row_count)
    ]


def timelines_text(app: DashboardApp) -> str:
    return app.timelines.query_one(TimelineBody).render().plain


def header_text(app: DashboardApp) -> str:
    return app.header.render().plain


@run_async
async def test_start_is_called_once_and_snapshot_renders() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        assert source.start_calls == 1
        assert "waiting for the first snapshot" in header_text(app)
        await deliver(pilot, source, make_snapshot(cpu=312.0))
        assert table_rows(app)[0][0] == BUSY_FUNCTION
        assert "312% of 8 cores" in timelines_text(app)
        header = header_text(app)
        assert "pid 4242" in header and "python train.py" in header
        assert "● REC" in header and "elapsed 1:15" in header
        assert SESSION_PATH in header
        processes = app.processes.query_one("#processes-body").render()
        assert not isinstance(processes, Text)  # a table once processes are known


@run_async
async def test_pause_freezes_display_until_resumed() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        first = make_snapshot(T0 + 75, cpu=312.0)
        await deliver(pilot, source, first)
        await pilot.press("p")
        assert "paused view" in header_text(app)
        assert "● REC" not in header_text(app)
        second = make_snapshot(T0 + 76, cpu=577.0)
        await deliver(pilot, source, second)
        assert app.latest is second
        assert app.shown is first
        assert "312% of 8 cores" in timelines_text(app)
        assert "577%" not in timelines_text(app)
        await pilot.press("p")
        assert "paused view" not in header_text(app)
        assert app.shown is second
        assert "577% of 8 cores" in timelines_text(app)


@run_async
async def test_zoom_cycles_windows_and_redraws() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, make_snapshot(T0 + 900))
        titles = []
        drawings = []
        for _ in range(4):
            await pilot.press("z")
            await pilot.pause()
            titles.append(str(app.timelines.border_title))
            drawings.append(timelines_text(app))
        assert titles == [
            "timelines · last 5 min",
            "timelines · last 15 min",
            "timelines · last 30 s",
            "timelines · last 60 s",
        ]
        # Each window draws the same series differently.
        assert len(set(drawings)) == 4


@run_async
async def test_help_opens_and_closes_while_snapshots_keep_arriving() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        content = app.screen.query_one("#help-text", Static).content
        assert isinstance(content, Table)
        help_text = plain(content)
        assert "zoom the timelines" in help_text
        assert "hot functions" in help_text and "command palette" in help_text
        # The main screen's widgets are not on the active screen now; updates still land.
        await deliver(pilot, source, make_snapshot(T0 + 80, cpu=444.0))
        assert app.shown is not None and app.shown.ts == T0 + 80
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        assert "444% of 8 cores" in timelines_text(app)


@run_async
async def test_help_lists_every_footer_binding() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        # What the footer shows: bindings marked show whose action is enabled (live mode).
        footer = {
            active.binding.key_display or active.binding.key
            for active in app.active_bindings.values()
            if active.binding.show and active.enabled and active.binding.action != "command_palette"
        }
        await pilot.press("question_mark")
        screen = app.screen
        assert isinstance(screen, HelpScreen)
        keys = {key for key, _ in screen._key_help}
        assert footer == {"p", "z", "s", "tab", "?", "q"}  # replay keys stay off the footer live
        assert footer <= keys
        assert "1 2 3" in keys  # the view keys are not in the footer, so the help must say them


@run_async
async def test_thread_selector_filters_hot_functions() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        assert BUSY_FUNCTION in {row[0] for row in table_rows(app)}
        select = app.stacks.query_one("#thread-select", Select)
        select.focus()
        await pilot.press("enter")  # open the overlay
        await pilot.press("down", "down", "enter")  # all threads, MainThread, pin_memory
        await pilot.pause()
        assert select.value == PIN_TID
        names = {row[0] for row in table_rows(app)}
        assert names == {"wait", "pin_memory"}
        assert "tid 4301" in str(app.stacks.border_title)
        # The choice survives the next snapshot.
        await deliver(pilot, source, make_snapshot(T0 + 76))
        assert {row[0] for row in table_rows(app)} == {"wait", "pin_memory"}
        assert select.value == PIN_TID


@run_async
async def test_sort_key_cycles_columns() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        assert table_rows(app)[0][0] == BUSY_FUNCTION  # own % by default
        await pilot.press("s")
        assert table_rows(app)[0][0] == "next_batch"  # total %: 58.4
        await pilot.press("s")
        assert [row[0] for row in table_rows(app)][:2] == ["collate", "conv2d_forward"]
        assert "sort: function ▲" in str(app.stacks.border_subtitle)


@run_async
async def test_clicking_a_header_sorts_and_again_reverses() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        table = app.stacks.table
        x = 0
        for key, column in table.columns.items():
            if key.value == "total":
                break
            x += column.get_render_width(table)
        await pilot.click(table, offset=(x + 2, 0))
        await pilot.pause()
        assert app.stacks.sort_key == "total"
        assert table_rows(app)[0][0] == "next_batch"
        await pilot.click(table, offset=(x + 2, 0))
        await pilot.pause()
        assert not app.stacks.descending
        assert table_rows(app)[0][0] == "log_metrics"  # smallest total % first


@run_async
async def test_stacks_error_shows_reason_and_fix_and_rest_keeps_working() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(
            pilot, source, make_snapshot(stack_error=PTRACE_ERROR, stack_hint=PTRACE_HINT)
        )
        message = app.stacks.query_one("#stacks-message", Static)
        assert message.display
        assert not app.stacks.table.display
        text = str(message.render())
        assert PTRACE_ERROR in text
        assert "kernel.yama.ptrace_scope=0" in text
        assert "312% of 8 cores" in timelines_text(app)
        # When stacks come back, the table replaces the message.
        await deliver(pilot, source, make_snapshot(T0 + 76))
        assert not message.display
        assert app.stacks.table.display
        assert table_rows(app)[0][0] == BUSY_FUNCTION


@pytest.mark.parametrize(
    ("exit_code", "expected"), [(3, "target exited (code 3)"), (None, "(code unknown)")]
)
@run_async
async def test_target_exit_banner_and_dashboard_stays_up(
    exit_code: int | None, expected: str
) -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        assert not app.banner.display
        await deliver(pilot, source, make_snapshot(target_exited=True, exit_code=exit_code))
        assert app.banner.display
        assert expected in str(app.banner.render())
        await pilot.press("z")
        assert app.is_running
        assert source.stop_calls == 0


def test_exit_banner_classes() -> None:
    assert exit_banner(make_snapshot(target_exited=True, exit_code=0))[1] == "-ok"
    assert exit_banner(make_snapshot(target_exited=True, exit_code=1))[1] == "-failed"
    assert exit_banner(make_snapshot(target_exited=True, exit_code=None))[1] == "-unknown"


@run_async
async def test_quit_stops_source_off_the_ui_thread_and_returns_session_path() -> None:
    source = FakeSource([make_snapshot()], session_path="/tmp/sessions/run-7.sofa")
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        await pilot.press("q")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == "/tmp/sessions/run-7.sofa"
    assert source.stop_calls == 1
    assert source.stop_threads[0] != threading.main_thread().ident


class SlowStopSource(FakeSource):
    """stop() takes until the test releases it (a session flushing a big file)."""

    def __init__(self) -> None:
        super().__init__([make_snapshot()])
        self.release = threading.Event()

    def stop(self) -> None:
        super().stop()
        self.release.wait(10)


@run_async
async def test_ui_stays_responsive_while_the_source_stops() -> None:
    source = SlowStopSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        await pilot.press("q")
        await wait_for(lambda: "stopping" in header_text(app))
        await pilot.press("q")  # a second q must not start a second stop
        await pilot.press("z")  # the UI still handles keys
        assert app.timelines.window == 300
        assert app.return_value is None
        source.release.set()
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == SESSION_PATH
    assert source.stop_calls == 1


@run_async
async def test_resize_to_40x12_shows_notice_without_crashing() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, source)
        await pilot.resize_terminal(40, 12)
        await pilot.pause()
        assert app.has_class("-too-small")
        notice = app.query_one("#too-small", Static)
        assert notice.display
        assert "40x12" in str(notice.render())
        assert not app.views.display and not app.verdict.display
        await deliver(pilot, source, make_snapshot(T0 + 76))
        await pilot.press("z", "s", "p", "p")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.has_class("-too-small")
        assert app.stacks.display
        assert table_rows(app)


@run_async
async def test_command_palette_runs_dashboard_commands() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        titles = {command.title for command in app.get_system_commands(app.screen)}
        assert {"Pause / resume view", "Zoom timelines", "Sort hot functions"} <= titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"pause / resume")
        # the palette searches in the background: wait for its first hit
        await wait_for(lambda: bool(app.screen.query(CommandList)) and _hits(app) > 0)
        await pilot.press("enter")
        await wait_for(lambda: app.paused)
        assert "paused view" in header_text(app)


@run_async
async def test_bursts_are_coalesced_to_the_refresh_interval() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source, refresh_s=2.0)
    async with app.run_test(size=SIZE) as pilot:
        first = make_snapshot(T0 + 75)
        second = make_snapshot(T0 + 76)
        before = time.monotonic()
        await deliver(pilot, source, first)
        await deliver(pilot, source, second)
        assert app.latest is second
        if time.monotonic() - before < 1.5:  # a very slow machine may already be past it
            assert app.shown is first  # drawn at most once per refresh_s
        # ... but the newest one is drawn when the interval ends
        await wait_for(lambda: app.shown is second)
        assert time.monotonic() - before >= 1.9


@run_async
async def test_source_that_fails_to_start_is_reported() -> None:
    class Broken(FakeSource):
        def start(self, on_snapshot: object) -> None:
            raise OSError("hub is gone")

    app = make_app(Broken())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "source failed: hub is gone" in header_text(app)


@run_async
async def test_tab_moves_focus_between_panes() -> None:
    source = FakeSource([make_snapshot()])
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        seen = []
        for _ in range(4):
            seen.append(app.focused.id if app.focused else None)
            await pilot.press("tab")
        assert seen == ["timelines", "processes", "thread-select", "hot-table"]


def test_footer_shows_the_bindings() -> None:
    keys = {binding.key for binding in DashboardApp.BINDINGS if not isinstance(binding, tuple)}
    assert {"p", "z", "s", "tab", "question_mark", "q"} <= keys


# -- the pure helpers behind the panes -----------------------------------------------------------


def test_human_units() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3.2 * 1024**3) == "3.2 GiB"
    assert human_bytes(None) == "-"
    assert human_rate(40 * 1024**2) == "40.0 MiB/s"
    assert human_duration(75) == "1:15"
    assert human_duration(3725) == "1:02:05"
    assert truncate_left("/a/b/c/file.py:10", 8) == "…e.py:10"


def test_resample_takes_maxima_and_holds_one_hz_points() -> None:
    points = [(100.0 + i, float(i)) for i in range(10)]
    # 10 s into 5 columns: each column holds two points and shows the larger.
    assert resample(points, end=109.5, window=10, columns=5) == [1.0, 3.0, 5.0, 7.0, 9.0]
    # 10 s into 20 columns: half-second columns repeat the last point instead of gaps.
    wide = resample(points, end=109.5, window=10, columns=20)
    assert None not in wide[1:]
    # Before the first point there is no data, and a failed reading leaves a gap.
    gappy = [(100.0, 1.0), (101.0, None), (102.0, 3.0)]
    assert resample(gappy, end=102.5, window=4, columns=4) == [None, 1.0, None, 3.0]


def test_sort_functions_is_stable_and_reversible() -> None:
    stats = functions()
    by_total = sort_functions(stats, "total", True)
    assert by_total[0].function == "next_batch"
    ascending = sort_functions(stats, "own", False)
    assert ascending[0].function == "log_metrics"
    assert sort_functions(stats, "class", False)[0].klass == "input"


def test_split_bar_fills_the_width_and_labels_what_fits() -> None:
    bar = split_bar({"input": 0.5, "compute": 0.25, "python": 0.125, "idle": 0.125}, 40)
    assert bar.cell_len == 40
    assert "input 50%" in bar.plain
    assert "no stack samples" in split_bar({}, 40).plain


def test_gpu_rows_collapse_when_many_devices() -> None:
    one = build_rows(make_snapshot(gpus=1), roomy=False)
    eight = build_rows(make_snapshot(gpus=8), roomy=False)
    assert [r.label for r in one if r.label.startswith("GPU")] == [
        "GPU0 util",
        "GPU0 mem",
        "GPU0 power",
    ]
    assert len([r for r in eight if r.label.startswith("GPU")]) == 8
    none = build_rows(make_snapshot(gpus=0), roomy=False)
    assert [r.message for r in none if r.message] == ["no NVIDIA GPU: NVML library not found"]


def test_dashboard_import_is_framework_free() -> None:
    """The dashboard never imports TensorFlow, PyTorch or Keras (its import time is a
    benchmark: benchmarks/latency.py)."""
    import subprocess
    import sys

    code = (
        "import sys; import sofa_top.tui.app; "
        "print(any(m in sys.modules for m in ('torch', 'tensorflow', 'keras')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ["False"]


def test_multiline_command_lines_stay_on_one_header_line() -> None:
    assert cmdline_text(("python", "-c", "\nimport time\n\twhile True: pass")) == (
        "python -c import time while True: pass"
    )
    assert cmdline_text((), "python") == "python"


@run_async
async def test_sparse_and_odd_snapshots_render() -> None:
    """Missing readings, a GPU error, markup-like names and many cores must not break a pane."""
    bare = Snapshot(
        ts=T0 + 3,
        started=T0,
        target=TargetInfo(1, "[bold]x", ()),
        session_path="/tmp/s.sofa",
        recording=False,
        history={},
    )
    odd_fn = FunctionStat("[red]f" * 40, "/x/[y].py", 1, 50.0, 50.0, "[t]", "python")
    base = make_snapshot(cpu_count=256)
    assert base.stacks is not None
    odd = replace(
        base,
        gpu=GpuSample(ts=T0 + 75, status="error", message="NVML: Unknown Error"),
        stacks=replace(base.stacks, functions=(odd_fn,), split={}),
        stacks_by_thread={},
    )
    source = FakeSource([bare, odd])
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, source)
        assert "○ not recording" in header_text(app)
        assert "[bold]x" in header_text(app)
        assert "waiting for stack samples" in str(
            app.stacks.query_one("#stacks-message", Static).render()
        )
        await deliver(pilot, source)
        assert "GPU error: NVML: Unknown Error" in timelines_text(app)
        assert table_rows(app)[0][0].startswith("[red]f")
        assert table_rows(app)[0][4] == "[t]"
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert "cores" in timelines_text(app)


@run_async
async def test_header_says_when_snapshots_stop_arriving() -> None:
    now = [T0 + 75]
    source = FakeSource([make_snapshot(T0 + 75)])
    app = DashboardApp(source, refresh_s=0.05, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source)
        assert "● REC" in header_text(app)
        now[0] = T0 + 87
        # the header ticks every refresh_s even without snapshots
        await wait_for(lambda: "no data for 0:12" in header_text(app))
        assert "elapsed 1:27" in header_text(app)
