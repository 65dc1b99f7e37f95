"""The live dashboard: a Textual app that draws the snapshots a ``SnapshotSource`` produces."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.events import Resize
from textual.geometry import Size
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Static, TabbedContent, TabPane, Tabs

from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.datamodel.source import Detachable, SignalEnded, SnapshotSource, target_of
from sofa_top.tui.confirm_quit import ConfirmQuitScreen, QuitChoice
from sofa_top.tui.formatting import cmdline_text, truncate, window_label
from sofa_top.tui.header import DashboardHeader
from sofa_top.tui.help_screen import HelpScreen
from sofa_top.tui.line_cache import update_static
from sofa_top.tui.log_pane import LogPane
from sofa_top.tui.messages import ReplayMoved, SnapshotArrived, SourceStopped
from sofa_top.tui.pipeline_panel import PipelinePane
from sofa_top.tui.processes_panel import ProcessesPane
from sofa_top.tui.ranks_panel import RanksPane
from sofa_top.tui.stacks_panel import StacksPanel
from sofa_top.tui.steps_panel import StepsPane
from sofa_top.tui.timelines import TimelinesPane, next_zoom
from sofa_top.tui.verdict_panel import VerdictPanel

if TYPE_CHECKING:  # the panel is imported when it opens (it loads compare)
    from sofa_top.collectors.discovery import JobCopy
    from sofa_top.tui.optimizer_screen import Runner

MIN_WIDTH = 60
MIN_HEIGHT = 15
WIDE_WIDTH = 120  # from here the processes pane gets a share of the width, not a fixed one
ROOMY_HEIGHT = 40  # from here timelines get taller graphs and the system-memory row
END_SIGNALS = (signal.SIGHUP, signal.SIGTERM)  # end the dashboard as its quit does
REPLAY_DRAW_S = 0.1  # a scrub must show at once; the live 1 s throttle would feel stuck
VIEWS = ("overview", "steps", "log")

# What the help screen says for each key (the footer uses the short binding descriptions).
KEY_HELP: tuple[tuple[str, str], ...] = (
    ("p", "pause the view: the display freezes, recording continues (p again resumes)"),
    ("z", "zoom the timelines: 30 s → 60 s → 5 min → 15 min"),
    ("s", "sort hot functions by the next column (or click a column header)"),
    ("1 2 3", "views: 1 overview (timelines, processes, hot functions), 2 steps and input "
     "pipeline, 3 workload output (or click a tab)"),
    ("tab", "focus the next pane (shift+tab: previous); arrows scroll it"),
    ("o", "optimizer: re-run a launched command under prefetch / XLA / depth-first and "
     "compare throughput"),
    ("?", "this help"),
    ("q", "quit: stop recording, finalize the session file and print its path; a workload "
     "sofa-top launched is stopped after you confirm (ctrl+c asks the same)"),
)  # fmt: skip
REPLAY_KEY_HELP: tuple[tuple[str, str], ...] = (
    ("← →", "move the replay cursor by 1 s (shift: 10 s)"),
    ("[ ]", "jump to the previous / next verdict change"),
    ("f", "follow the end of the recording again"),
    ("z", "zoom the timelines: 30 s → 60 s → 5 min → 15 min"),
    ("s", "sort hot functions by the next column (or click a column header)"),
    ("1 2 3", "views: 1 overview, 2 steps and input pipeline, 3 workload output"),
    ("tab", "focus the next pane (shift+tab: previous); arrows scroll it"),
    ("?", "this help"),
    ("q", "close the replay (the session file is not changed)"),
)
REPLAY_ACTIONS = frozenset({"scrub", "marker", "follow"})
SCRUB = Binding.Group("Scrub", compact=True)  # one footer entry: "←→ Scrub"
MARKER = Binding.Group("Verdict", compact=True)


@runtime_checkable
class ReplayControls(Protocol):
    """What a replay source offers besides ``SnapshotSource`` (``ReplaySource`` in
    ``sofa_top.recording.replay``)."""

    def seek(self, ts: float) -> float:
        """Move the cursor to ``ts``."""
        ...

    def step(self, seconds: float) -> float:
        """Move the cursor by ``seconds``."""
        ...

    def next_marker(self) -> float | None:
        """Jump to the next verdict change (None: none)."""
        ...

    def prev_marker(self) -> float | None:
        """Jump to the previous verdict change (None: none)."""
        ...

    def follow(self) -> None:
        """Let the cursor follow the end of the recording again."""
        ...

    @property
    def following(self) -> bool:
        """True while the cursor follows the end of the recording."""
        ...

    @property
    def time_range(self) -> tuple[float, float] | None:
        """First and last recorded instant (None: nothing recorded yet)."""
        ...


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
        Binding("o", "optimizer", "Optimize", show=False),
        # priority: the screen's own (hidden) tab binding would otherwise keep it off the footer.
        Binding("tab", "focus_next", "Next pane", priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        # The terminal's Ctrl-C arrives as a key (raw mode): it asks before stopping anything.
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("1", "show_view('overview')", "Overview", show=False),
        Binding("2", "show_view('steps')", "Steps", show=False),
        Binding("3", "show_view('log')", "Log", show=False),
        # Replay only (check_action hides them live). Priority: the focused table would
        # otherwise take the arrows.
        Binding("left", "scrub(-1)", "-1s", priority=True, key_display="←", group=SCRUB),
        Binding("right", "scrub(1)", "+1s", priority=True, key_display="→", group=SCRUB),
        Binding("shift+left", "scrub(-10)", "-10s", show=False, priority=True),
        Binding("shift+right", "scrub(10)", "+10s", show=False, priority=True),
        Binding("left_square_bracket", "marker(-1)", "Prev", key_display="[", group=MARKER),
        Binding("right_square_bracket", "marker(1)", "Next", key_display="]", group=MARKER),
        Binding("f", "follow", "Follow end", show=False),
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
        self.stopped_workload = False  # the user confirmed stopping a launched workload
        self.detached_workload = False  # the user chose to leave it running
        self.signalled: str | None = None  # SIGHUP (the terminal closed) or SIGTERM ended us
        # the optimizer panel's comparison runner and job copier (None: compare's own)
        self.optimizer_runner: Runner | None = None
        self.optimizer_copier: Callable[[int], JobCopy] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.replay = isinstance(source, ReplayControls)
        self._draw_interval = min(self.refresh_s, REPLAY_DRAW_S) if self.replay else self.refresh_s
        self._move_lock = threading.Lock()  # replay moves run one at a time, in key order
        self._last_draw = float("-inf")
        self._draw_timer: Timer | None = None
        self._tick_s = self.refresh_s if self.refresh_s > 0 else 1.0  # the header clock
        # Held directly: App.query_one only searches the active screen, which is the help
        # screen or the command palette while those are open and snapshots keep arriving.
        self.header = DashboardHeader(source.session_path, id="header")
        self.header.replay = self.replay
        self.verdict = VerdictPanel(id="verdict")
        self.verdict.replay = self.replay
        self.banner = Static(id="banner")
        self.timelines = TimelinesPane(id="timelines")
        self.processes = ProcessesPane(id="processes")
        self.ranks = RanksPane(id="ranks")  # shown only for a job with ranks
        self.ranks.display = False
        self.stacks = StacksPanel(id="stacks")
        self.steps = StepsPane(id="steps")
        self.pipeline = PipelinePane(id="pipeline")
        self.log_pane = LogPane(id="log")
        self.log_pane.replay = self.replay
        self.views = TabbedContent(id="views", initial="tab-overview")
        self.too_small = Static(id="too-small")
        self.top = Horizontal(self.timelines, self.processes, id="top")

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.verdict
        yield self.banner
        with self.views:
            with TabPane("1 Overview", id="tab-overview"):
                yield self.top
                yield self.ranks
                yield self.stacks
            with TabPane("2 Steps", id="tab-steps"):
                yield self.steps
                yield self.pipeline
            with TabPane("3 Log", id="tab-log"):
                yield self.log_pane
        yield self.too_small
        yield Footer()

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Tabs switch with 1/2/3 or a click; a focusable tab strip would add a stop to the
        # tab-key cycle between panes.
        self.views.query_one(Tabs).can_focus = False
        self.set_class(self.replay, "-replay")
        if self.replay:
            self.title = f"{self.title} replay"
        self._apply_size(self.size)
        self.set_interval(self._tick_s, self._tick)
        self.timelines.focus()
        try:
            self.source.start(self._on_snapshot)
        except Exception as exc:  # a dead source must not take the terminal down with it
            self.header.update_state(status=f"source failed: {exc}")
        if self.replay:
            self._replay_move("info", 0.0)  # learn the recording's end for the header

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
        self.set_class(roomy, "-roomy")
        if roomy != self.verdict.roomy:
            self.verdict.set_roomy(roomy)
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
        snapshot = self.latest = message.snapshot
        if self.paused:
            return
        if snapshot.target_exited and snapshot.recording:
            # how the workload ended (its error line comes a little after the exit) is news:
            # not a second later; the hub sends these only until the session is final
            self._draw_latest()
        else:
            self._schedule_draw()

    def _schedule_draw(self) -> None:
        # Coalesce bursts (a replay can produce snapshots faster than a terminal should redraw).
        since = time.monotonic() - self._last_draw
        if since >= self._draw_interval:
            self._draw_latest()
        elif self._draw_timer is None:
            self._draw_timer = self.set_timer(self._draw_interval - since, self._deferred_draw)

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
        self.verdict.show(snapshot)
        banner = self.banner
        if snapshot.target_exited:
            text, klass = exit_banner(snapshot)
            update_static(banner, Text(text))
            banner.set_classes(klass)
            banner.display = True
        else:
            banner.display = False
        self._render_view(snapshot)
        self._fit_top()

    def _render_view(self, snapshot: Snapshot) -> None:
        # Only the view on screen: each redraw costs CPU in the profiled machine's budget, and
        # a view catches up from the snapshot on screen when it is switched to.
        view = self.views.active or "tab-overview"
        if view == "tab-overview":
            self.timelines.show(snapshot)
            self.processes.show(snapshot.process)
            self.ranks.display = bool(snapshot.ranks)
            if snapshot.ranks:
                self.ranks.show(snapshot.ranks, snapshot.rank_verdict)
            self.stacks.show(snapshot)
        elif view == "tab-steps":
            self.steps.show(snapshot)
            self.pipeline.show(snapshot)
        elif view == "tab-log":
            # The snapshot holds the last LOG_LINES lines, all the pane keeps: nothing is lost.
            self.log_pane.show(snapshot)

    def _fit_top(self) -> None:
        # The top row is as tall as the timelines need, but never starves the stacks pane.
        lines = max(self.timelines.body.line_count, 3)
        # Header, tab strip and footer, the verdict (with its border when roomy), the banner.
        fixed = 4 + self.verdict.line_count + (2 if self.verdict.roomy else 0)
        fixed += 1 if self.banner.display else 0
        if self.ranks.display:
            # the ranks pane takes at most a third of the rest; it scrolls past that
            ranks = min(self.ranks.wanted_height, max(4, (self.size.height - fixed) // 3))
            self.ranks.styles.height = ranks
            fixed += ranks
        limit = max(6, (self.size.height - fixed) // 2)
        self.top.styles.height = min(lines + 2, limit)

    def _tick(self) -> None:
        # Every drawn snapshot moves the header's clock too: ticking between snapshots would
        # repaint twice a second. The tick keeps the clock (and the stale-data warning) going
        # when snapshots stop coming or the view is paused.
        if self.replay:
            return  # the cursor, not the clock, sets a replay's time
        if not self.paused and time.monotonic() - self._last_draw < 1.5 * self._tick_s:
            return
        self.header.update_state(now=self.clock())

    # -- actions --------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        """Freeze or unfreeze the display; the source keeps recording either way."""
        if self.replay:
            return  # the palette offers it too; a recording is still by nature
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

    def action_optimizer(self) -> None:
        """Show the optimizer screen (re-run and compare toggles)."""
        from sofa_top.tui.optimizer_screen import open_optimizer

        open_optimizer(self)

    def action_help(self) -> None:
        """Show the help screen."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(REPLAY_KEY_HELP if self.replay else KEY_HELP))

    def action_show_view(self, view: str) -> None:
        """Switch to the overview, steps or log view."""
        if view in VIEWS:
            self.views.active = f"tab-{view}"

    @on(TabbedContent.TabActivated, "#views")
    def _view_changed(self, event: TabbedContent.TabActivated) -> None:
        if self.shown is not None:
            self._render_view(self.shown)
            self._fit_top()
        # Focus follows the view, so arrows scroll what is on screen.
        target = {
            "tab-overview": self.timelines,
            "tab-steps": self.pipeline,
            "tab-log": self.log_pane.log_view,
        }.get(event.pane.id or "")
        if target is not None and self.screen is self.screen_stack[0]:
            target.focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Replay keys exist only in a replay; pausing a replay means nothing."""
        if action in REPLAY_ACTIONS:
            return self.replay
        if action == "toggle_pause":
            return not self.replay
        return True

    def workload_running(self) -> bool:
        """True while a workload sofa-top launched is still running (quitting would stop it)."""
        if self.replay:
            return False
        snapshot = self.latest
        if snapshot is not None:
            return (
                snapshot.target.launched and not snapshot.target_exited and not snapshot.read_only
            )
        # No snapshot yet: the source (a live session) still knows what it launched.
        target = target_of(self.source)
        return target is not None and target.launched

    async def action_quit(self) -> None:
        """Quit; a running launched workload is stopped only after the user confirms."""
        if self.stopping or isinstance(self.screen, ConfirmQuitScreen):
            return
        if self.workload_running():
            can_detach = isinstance(self.source, Detachable)
            screen = ConfirmQuitScreen(self._target_line(), can_detach=can_detach)
            self.push_screen(screen, self._quit_answered)
            return
        self._begin_stop()

    def _target_line(self) -> str:
        snapshot = self.latest
        target = snapshot.target if snapshot is not None else target_of(self.source)
        if target is None:
            return ""
        return truncate(f"pid {target.pid}: {cmdline_text(target.cmdline, target.name)}", 70)

    def _quit_answered(self, choice: QuitChoice | None) -> None:
        if choice == "stop":
            self.stopped_workload = True
            self._begin_stop()
        elif choice == "detach":
            self.detached_workload = True
            self._begin_stop()

    def on_os_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGHUP (the terminal closed: an ssh drop, a killed tmux pane) or SIGTERM: end as the
        quit dialog's stop does, without asking (``--keep-running``: leave the job running).
        A signal handler: it only hands the work to the event loop."""
        name = signal.Signals(signum).name
        loop = self._loop
        if loop is None or loop.is_closed():  # not running (yet): end without the UI
            threading.Thread(target=self._end_unseen, args=(name,), daemon=False).start()
            return
        loop.call_soon_threadsafe(self._signal_stop, name)

    def _signal_stop(self, name: str) -> None:
        self.signalled = self.signalled or name
        self.stopping = False  # a quit in progress ends the same way: finish is serialized
        self._begin_stop()

    def _end_unseen(self, name: str) -> None:
        self.signalled = name
        self._stop_with(self.source)

    def _stop_with(self, source: SnapshotSource) -> None:
        """Stop ``source`` the way the user or the signal asked."""
        if self.signalled is not None and isinstance(source, SignalEnded):
            source.signalled(self.signalled)
        elif self.detached_workload and isinstance(source, Detachable):
            source.detach()
        else:
            source.stop()

    def _begin_stop(self) -> None:
        """Stop the source (off the UI thread), then exit with the session path."""
        if self.stopping:
            return
        self.stopping = True
        if self.replay:
            status = "closing the replay…"
        elif self.signalled:
            status = f"{self.signalled}: stopping the workload, finalizing the session…"
        elif self.detached_workload:
            status = "detaching: finalizing the session, the workload keeps running…"
        elif self.stopped_workload:
            status = "stopping: finalizing the session, then the workload…"
        else:
            status = "stopping: finalizing the session…"
        self.header.update_state(status=status)
        self._stop_source()

    # -- replay ---------------------------------------------------------------------------------

    def action_scrub(self, seconds: float) -> None:
        """Move the replay cursor by ``seconds``."""
        self._replay_move("step", float(seconds))

    def action_marker(self, direction: int) -> None:
        """Jump to the next (1) or previous (-1) verdict change."""
        self._replay_move("marker", float(direction))

    def action_follow(self) -> None:
        """Let the replay cursor follow the end of the recording."""
        self._replay_move("follow", 0.0)

    @work(thread=True, group="replay-move")
    def _replay_move(self, kind: str, amount: float) -> None:
        # The source reads SQLite (and may wait for its own snapshot thread): never on the UI.
        source = self.source
        if not isinstance(source, ReplayControls):
            return
        note: str | None = None
        at: float | None = None
        with self._move_lock:
            try:
                if kind == "step":
                    at = source.step(amount)
                elif kind == "marker":
                    at = source.next_marker() if amount > 0 else source.prev_marker()
                    if at is None:
                        note = f"no {'later' if amount > 0 else 'earlier'} verdict change"
                elif kind == "follow":
                    source.follow()
                rng = source.time_range
                end = None if rng is None else rng[1]
                following = source.following
            except Exception as exc:  # a damaged file must not take the dashboard down
                self.post_message(ReplayMoved(None, None, False, f"replay: {exc}"))
                return
        self.post_message(ReplayMoved(at, end, following, note))

    @on(ReplayMoved)
    def _replay_moved(self, message: ReplayMoved) -> None:
        self.header.update_state(replay_end=message.end, following=message.following)
        if message.note:
            self.notify(message.note, timeout=3)

    @work(thread=True, exclusive=True, group="stop-source")
    def _stop_source(self) -> None:
        error: str | None = None
        try:
            self._stop_with(self.source)
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
        yield SystemCommand(
            "Optimizer", "Re-run and compare optimizer toggles", self.action_optimizer
        )
        for view in VIEWS:
            yield SystemCommand(
                f"Show {view}",
                f"Switch to the {view} view",
                lambda v=view: self.action_show_view(v),
            )


def run_dashboard(
    source: SnapshotSource, *, refresh_s: float = 1.0, title: str = "sofa-top"
) -> str | None:
    """Run the dashboard until the user quits; returns the session path (None if it died)."""
    app = DashboardApp(source, refresh_s=refresh_s, title=title)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, app.on_os_signal) for sig in END_SIGNALS}
    try:
        return app.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Idempotent: after a normal quit this is a no-op; after a crash it still finalizes.
        source.stop()
