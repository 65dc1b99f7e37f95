"""The dashboard's redraw economy: a snapshot repaints only what changed, and what it repaints
looks exactly as a full repaint would."""

from __future__ import annotations

import asyncio
import functools
import io
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from rich.console import Console, RenderableType
from rich.style import Style
from rich.text import Text
from test_tui_pilot import drawn as snapshot_drawn
from textual.geometry import Region
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widget import Widget
from tui_fakes import T0, FakeSource, launch_snapshot, make_snapshot

from sofa_top.datamodel.samples import ProcessSample, ProcInfo
from sofa_top.datamodel.snapshot import Point, Snapshot
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.line_cache import LineCachedWidget
from sofa_top.tui.processes_panel import process_lines, process_table
from sofa_top.tui.sparkline import BASELINE, LOW, append_runs, resample, sparkline
from sofa_top.tui.stacks_panel import HotTable


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


async def deliver(pilot: Pilot[str], source: FakeSource, snapshot: Snapshot) -> None:
    await snapshot_drawn(pilot, source.push(snapshot))


def drawn(widget: Widget) -> list[Strip]:
    """What the widget's lines look like now (through Textual's own line cache)."""
    return widget.render_lines(Region(0, 0, *widget.outer_size))


def redrawn(widget: Widget) -> list[Strip]:
    """What they look like after a full repaint."""
    widget.refresh()
    return drawn(widget)


def mismatches(app: DashboardApp) -> list[str]:
    """Visible widgets whose partly repainted lines differ from a full repaint."""
    widgets: list[Widget] = [*app.query(LineCachedWidget), app.stacks.table]
    return [
        str(widget.id)
        for widget in widgets
        if widget.display and widget.outer_size and drawn(widget) != redrawn(widget)
    ]


@contextmanager
def refreshes() -> Iterator[list[tuple[Widget, bool]]]:
    """Every ``Widget.refresh`` call meanwhile: (widget, whether it was for regions only)."""
    calls: list[tuple[Widget, bool]] = []
    original = Widget.refresh

    def spy(self: Widget, *regions: Region, **kwargs: bool) -> Widget:
        calls.append((self, bool(regions)))
        return original(self, *regions, **kwargs)

    Widget.refresh = spy  # type: ignore[assignment,method-assign]
    try:
        yield calls
    finally:
        Widget.refresh = original  # type: ignore[method-assign]


def dashboard_widgets(app: DashboardApp) -> set[Widget]:
    """The widgets a snapshot updates (not Textual's own: footer, tabs, scrollbars)."""
    return {
        *app.query(LineCachedWidget),
        app.stacks.table,
        app.timelines,
        app.processes,
        app.stacks,
        app.steps,
        app.pipeline,
        app.log_pane,
    }


def with_own_pct(snapshot: Snapshot, index: int, own_pct: float) -> Snapshot:
    """``snapshot`` with the ``index``-th hot function's own % changed."""
    assert snapshot.stacks is not None
    functions = list(snapshot.stacks.functions)
    functions[index] = replace(functions[index], own_pct=own_pct)
    return replace(snapshot, stacks=replace(snapshot.stacks, functions=tuple(functions)))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@run_async
async def test_partial_repaints_look_like_full_ones(size: tuple[int, int]) -> None:
    source = FakeSource()
    now = [T0 + 75]
    app = DashboardApp(source, refresh_s=0.0, clock=lambda: now[0])
    async with app.run_test(size=size) as pilot:
        for second in range(5):
            now[0] = T0 + 75 + second
            snapshot = make_snapshot(now[0], gpus=1)
            await deliver(pilot, source, with_own_pct(snapshot, 1, 14.0 + second / 10))
            assert mismatches(app) == []
        await pilot.press("2")
        await pilot.pause()
        for second in range(3):
            now[0] = T0 + 80 + second
            await deliver(pilot, source, launch_snapshot(now[0]))
            assert mismatches(app) == []


@run_async
async def test_an_unchanged_snapshot_repaints_nothing() -> None:
    source = FakeSource()
    app = DashboardApp(source, refresh_s=0.0, clock=lambda: T0 + 75)
    async with app.run_test(size=(160, 48)) as pilot:
        await deliver(pilot, source, make_snapshot(T0 + 75))
        with refreshes() as calls:
            await deliver(pilot, source, make_snapshot(T0 + 75))  # equal, not the same object
        repainted = {widget for widget, _ in calls} & dashboard_widgets(app)
        assert repainted == set()


@run_async
async def test_a_new_second_repaints_lines_not_widgets() -> None:
    source = FakeSource()
    now = [T0 + 75]
    app = DashboardApp(source, refresh_s=0.0, clock=lambda: now[0])
    async with app.run_test(size=(160, 48)) as pilot:
        await deliver(pilot, source, make_snapshot(now[0]))
        now[0] += 1
        with refreshes() as calls:
            await deliver(pilot, source, with_own_pct(make_snapshot(now[0]), 1, 14.3))
        ours = dashboard_widgets(app)
        assert {widget for widget, _ in calls if widget in ours}  # the clock moved, at least
        full = {str(widget.id) for widget, regions in calls if widget in ours and not regions}
        assert full == set()
        assert app.stacks.table.get_row_at(1)[2].plain == "14.3"


@run_async
async def test_a_reordered_table_repaints_rows_not_the_table_and_the_cursor_follows() -> None:
    source = FakeSource()
    app = DashboardApp(source, refresh_s=0.0, clock=lambda: T0 + 75)
    async with app.run_test(size=(160, 48)) as pilot:
        await deliver(pilot, source, make_snapshot(T0 + 75))
        table: HotTable = app.stacks.table
        table.move_cursor(row=1, animate=False)
        await pilot.pause()
        name = table.get_row_at(1)[0].plain
        with refreshes() as calls:
            await deliver(pilot, source, with_own_pct(make_snapshot(T0 + 76), 1, 99.0))
        # the two rows that swapped places are repainted, the table as a whole is not
        assert not [regions for widget, regions in calls if widget is table and not regions]
        assert table.get_row_at(0)[0].plain == name  # now the hottest ...
        assert table.cursor_row == 0  # ... and the cursor went with it
        assert mismatches(app) == []


@run_async
async def test_the_clock_ticks_only_between_snapshots() -> None:
    source = FakeSource()
    now = [T0 + 75.0]
    app = DashboardApp(source, refresh_s=1.0, clock=lambda: now[0])
    async with app.run_test(size=(100, 32)) as pilot:
        await deliver(pilot, source, make_snapshot(now[0]))
        assert app.header.now == T0 + 75
        now[0] = T0 + 75.5
        app._last_draw = time.monotonic()  # a snapshot was drawn a moment ago (however busy
        app._tick()  # the machine): its clock stands
        assert app.header.now == T0 + 75
        app._last_draw = time.monotonic() - 10  # snapshots stopped coming
        app._tick()
        assert app.header.now == T0 + 75.5


def test_resample_matches_a_scan_of_the_whole_history() -> None:
    rng = random.Random(7)

    def scan(points: list[Point], end: float, window: float, columns: int) -> list[float | None]:
        # Only the points inside the window: what resample does once it found the first one.
        start = end - window
        inside = [p for p in points if p[0] > start]
        before = [p for p in points if p[0] <= start][-1:]
        return resample(before + inside, end=end, window=window, columns=columns)

    for _ in range(200):
        points: list[Point] = []
        ts = T0
        for _ in range(rng.randint(0, 400)):
            ts += rng.choice([0.1, 0.5, 1.0, 1.0, 3.0])
            points.append((ts, None if rng.random() < 0.05 else rng.random() * 100))
        end = ts + rng.choice([0.0, 0.5, -30.0])
        window = float(rng.choice([30, 60, 300, 900]))
        columns = rng.randint(1, 120)
        expected = scan(points, end, window, columns)
        assert resample(tuple(points), end=end, window=window, columns=columns) == expected


def test_sparkline_draws_runs_of_one_style_as_one_span() -> None:
    flat = sparkline([0.0] * 20, vmax=1.0, style=LOW)
    assert [(span.start, span.end, span.style) for span in flat[0].spans] == [(0, 20, BASELINE)]
    text = append_runs(Text(), [("a", LOW), ("b", LOW), ("c", None), ("d", Style())])
    assert text.plain == "abcd"
    assert [(span.start, span.end) for span in text.spans] == [(0, 2)]


def cells(renderable: RenderableType, width: int) -> list[list[tuple[str, Style]]]:
    """Each character rich prints for ``renderable``, with its style."""
    console = Console(width=width, file=io.StringIO(), color_system="truecolor")
    lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
    return [[(ch, seg.style or Style()) for seg in line for ch in seg.text] for line in lines]


def test_process_lines_lay_out_exactly_like_the_rich_table() -> None:
    rng = random.Random(3)
    states = ["running", "sleeping", "disk-sleep", "zombie", "tracing-stop", "exited", "odd"]
    roles = ["target", "DataLoader worker", "child", "", "[worker]", "pin memory thread", "数据"]
    laid_out = 0
    for _ in range(60):
        procs: list[ProcInfo] = []
        for i in range(rng.randint(1, 7)):
            pid = 4242 if i == 0 else rng.randint(100, 99999)
            ppid = 1 if i == 0 else rng.choice([p.pid for p in procs])
            procs.append(
                ProcInfo(
                    pid, ppid, "python", ("python",), T0,
                    rng.choice([None, 0.0, 3.3, 99.5, 1234.5]),
                    rng.choice([None, 1, 41, 1234]),
                    rng.choice([None, 0, 1000, 12 * 2**20, 3 * 2**30, 5 * 2**40]),
                    0, 0, 0, rng.choice(states), alive=rng.random() > 0.2, role=rng.choice(roles),
                )
            )  # fmt: skip
        sample = ProcessSample(T0, 4242, True, tuple(procs), 1.0, 1, 0, 0, 1)
        for width in range(1, 121, 7):
            lines = process_lines(sample, width)
            if lines is None:
                continue  # too narrow: the rich table draws it
            laid_out += 1
            expected = cells(process_table(sample, width), width)
            assert cells(Text("\n").join(lines), width) == expected, (width, procs)
    assert laid_out > 500


@run_async
async def test_a_table_with_fewer_functions_keeps_its_rows_and_its_caches_stay_small() -> None:
    source = FakeSource()
    app = DashboardApp(source, refresh_s=0.0, clock=lambda: T0 + 75)
    async with app.run_test(size=(160, 48)) as pilot:
        first = make_snapshot(T0 + 75)
        await deliver(pilot, source, first)
        table: HotTable = app.stacks.table
        rows = table.row_count
        assert first.stacks is not None and rows == len(first.stacks.functions)
        fewer = replace(first.stacks, functions=first.stacks.functions[:2])
        with refreshes() as calls:
            await deliver(pilot, source, replace(make_snapshot(T0 + 76), stacks=fewer))
        # the row count stands (blank rows below): no layout pass of the whole screen
        assert table.row_count == rows
        assert [table.get_row_at(i)[0].plain for i in range(2, rows)] == [""] * (rows - 2)
        assert not [widget for widget, regions in calls if widget is table and not regions]
        # a minute of changing numbers: the renders made stale by each update are dropped
        for k in range(60):
            await deliver(pilot, source, with_own_pct(make_snapshot(T0 + 77 + k), 1, 20.0 + k))
        # (DataTable keeps renders in private LRU caches of up to 10,000 cells)
        assert len(table._cell_render_cache) <= 2 * rows * len(table.columns)
        assert mismatches(app) == []
