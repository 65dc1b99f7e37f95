"""The live dashboard: a Textual app that draws the snapshots a ``SnapshotSource`` produces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Static

from sofa_top.snapshot import Snapshot
from sofa_top.source import SnapshotSource
from sofa_top.tui.formatting import window_label
from sofa_top.tui.header import DashboardHeader
from sofa_top.tui.help_screen import HelpScreen
from sofa_top.tui.messages import SnapshotArrived, SourceStopped
from sofa_top.tui.processes_panel import ProcessesPane
from sofa_top.tui.stacks_panel import StacksPanel
from sofa_top.tui.timelines import TimelinesPane, next_zoom

MIN_WIDTH = 60
MIN_HEIGHT = 15
WIDE_WIDTH = 120  # from here the processes pane gets a share of the width, not a fixed one
ROOMY_HEIGHT = 40  # from here timelines get taller graphs and the system-memory row

# What the help screen says for each key (the footer uses the short binding descriptions).
KEY_HELP: tuple[tuple[str, str], ...] = (
    ("p", "pause the view: the display freezes, recording continues (p again resumes)"),
    ("z", "zoom the timelines: 30 s → 60 s → 5 min → 15 min"),
    ("s", "sort hot functions by the next column (or click a column header)"),
    ("tab", "focus the next pane (shift+tab: previous); arrows scroll it"),
    ("?", "this help"),
    ("q", "quit: stop recording, finalize the session file and print its path"),
)


def exit_banner(snapshot: Snapshot) -> tuple[str, str]:
    """The target-exit banner text and its CSS class (by exit status)."""
    if snapshot.exit_code is None:
        code, klass = "code unknown", "-unknown"
    else:
        code = f"code {snapshot.exit_code}"
        klass = "-ok" if snapshot.exit_code == 0 else "-failed"
    return f"■ target exited ({code}) · the dashboard stays up; q finalizes the session", klass


class DashboardApp(App[str]):
    """Live view of one profiling session; returns the session path when it quits."""

    CSS_PATH = "dashboard.tcss"
    BINDINGS = [
        Binding("p", "toggle_pause", "Pause"),
        Binding("z", "zoom", "Zoom"),
        Binding("s", "sort", "Sort"),
        # priority: the screen's own (hidden) tab binding would otherwise keep it off the footer.
        Binding("tab", "focus_next", "Next pane", priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        source: SnapshotSource,
        *,
        refresh_s: float = 1.0,
        title: str = "sofa-top",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.title = title
        self.source = source
        self.refresh_s = max(0.0, refresh_s)
        self.clock = clock
        self.latest: Snapshot | None = None  # newest snapshot received
        self.shown: Snapshot | None = None  # snapshot on screen (older than latest when paused)
        self.paused = False
        self.stopping = False
        self.stop_error: str | None = None
        self._last_draw = float("-inf")
        self._draw_timer: Timer | None = None
        # Held directly: App.query_one only searches the active screen, which is the help
        # screen or the command palette while those are open and snapshots keep arriving.
        self.header = DashboardHeader(source.session_path, id="header")
        self.banner = Static(id="banner")
        self.timelines = TimelinesPane(id="timelines")
        self.processes = ProcessesPane(id="processes")
        self.stacks = StacksPanel(id="stacks")
        self.too_small = Static(id="too-small")
        self.top = Horizontal(self.timelines, self.processes, id="top")

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.banner
        yield self.top
        yield self.stacks
        yield self.too_small
        yield Footer()

    def on_mount(self) -> None:
        self._apply_size(self.size)
        self.set_interval(self.refresh_s if self.refresh_s > 0 else 1.0, self._tick)
        self.timelines.focus()
        try:
            self.source.start(self._on_snapshot)
        except Exception as exc:  # a dead source must not take the terminal down with it
            self.header.update_state(status=f"source failed: {exc}")

    def on_resize(self, event: Resize) -> None:
        self._apply_size(event.size)

    def _apply_size(self, size: Size) -> None:
        too_small = size.width < MIN_WIDTH or size.height < MIN_HEIGHT
        self.set_class(too_small, "-too-small")
        self.set_class(size.width >= WIDE_WIDTH, "-wide")
        self.too_small.update(
            f"terminal too small: {size.width}x{size.height}\n"
            f"sofa-top needs at least {MIN_WIDTH}x{MIN_HEIGHT}\n"
            "(recording continues; q quits)"
        )
        roomy = size.height >= ROOMY_HEIGHT
        if roomy != self.timelines.roomy:
            self.timelines.roomy = roomy
            self._render_snapshot(self.shown)
        self._fit_top()

    # -- data path ------------------------------------------------------------------------------

    def _on_snapshot(self, snapshot: Snapshot) -> None:
        # Runs on the source's thread: post_message is the thread-safe way in.
        self.post_message(SnapshotArrived(snapshot))

    @on(SnapshotArrived)
    def _snapshot_arrived(self, message: SnapshotArrived) -> None:
        self.latest = message.snapshot
        if not self.paused:
            self._schedule_draw()

    def _schedule_draw(self) -> None:
        # Coalesce bursts (a replay can produce snapshots faster than a terminal should redraw).
        since = time.monotonic() - self._last_draw
        if since >= self.refresh_s:
            self._draw_latest()
        elif self._draw_timer is None:
            self._draw_timer = self.set_timer(self.refresh_s - since, self._deferred_draw)

    def _deferred_draw(self) -> None:
        self._draw_timer = None
        if not self.paused:
            self._draw_latest()

    def _draw_latest(self) -> None:
        self._last_draw = time.monotonic()
        if self.latest is not None and self.latest is not self.shown:
            self.shown = self.latest
            self._render_snapshot(self.shown)

    def _render_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        self.header.update_state(snapshot=snapshot, now=self.clock())
        banner = self.banner
        if snapshot.target_exited:
            text, klass = exit_banner(snapshot)
            banner.update(Text(text))
            banner.set_classes(klass)
            banner.display = True
        else:
            banner.display = False
        self.timelines.show(snapshot)
        self.processes.show(snapshot.process)
        self.stacks.show(snapshot)
        self._fit_top()

    def _fit_top(self) -> None:
        # The top row is as tall as the timelines need, but never starves the stacks pane.
        lines = max(self.timelines.body.line_count, 3)
        limit = max(6, (self.size.height - 3) // 2)
        self.top.styles.height = min(lines + 2, limit)

    def _tick(self) -> None:
        self.header.update_state(now=self.clock())

    # -- actions --------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        """Freeze or unfreeze the display; the source keeps recording either way."""
        self.paused = not self.paused
        self.header.update_state(paused=self.paused)
        if not self.paused:
            self._draw_latest()

    def action_zoom(self) -> None:
        """Cycle the timeline window."""
        self.timelines.set_window(next_zoom(self.timelines.window))
        self._fit_top()

    def action_sort(self) -> None:
        """Sort the hot-functions table by the next column."""
        self.stacks.cycle_sort()

    def action_help(self) -> None:
        """Show the help screen."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(KEY_HELP))

    async def action_quit(self) -> None:
        """Stop the source (off the UI thread), then exit with the session path."""
        if self.stopping:
            return
        self.stopping = True
        self.header.update_state(status="stopping: finalizing the session…")
        self._stop_source()

    @work(thread=True, exclusive=True, group="stop-source")
    def _stop_source(self) -> None:
        error: str | None = None
        try:
            self.source.stop()
        except Exception as exc:  # reported on exit; the session path is still worth printing
            error = f"{type(exc).__name__}: {exc}"
        self.post_message(SourceStopped(error))

    @on(SourceStopped)
    def _source_stopped(self, message: SourceStopped) -> None:
        self.stop_error = message.error
        if message.error is None:
            self.exit(self.source.session_path)
        else:
            self.exit(
                self.source.session_path,
                return_code=1,
                message=Text(f"sofa-top: finalizing the session failed: {message.error}"),
            )

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Command-palette entries (ctrl+p) for the dashboard's own actions."""
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Pause / resume view",
            "Freeze the display (recording continues)",
            self.action_toggle_pause,
        )
        window = window_label(next_zoom(self.timelines.window))
        yield SystemCommand("Zoom timelines", f"Show the last {window}", self.action_zoom)
        yield SystemCommand("Sort hot functions", "Sort by the next column", self.action_sort)
        yield SystemCommand("Help", "Key bindings and what each pane shows", self.action_help)


def run_dashboard(
    source: SnapshotSource, *, refresh_s: float = 1.0, title: str = "sofa-top"
) -> str | None:
    """Run the dashboard until the user quits; returns the session path (None if it died)."""
    app = DashboardApp(source, refresh_s=refresh_s, title=title)
    try:
        return app.run()
    finally:
        # Idempotent: after a normal quit this is a no-op; after a crash it still finalizes.
        source.stop()
