"""The home screen (``sofa-top`` with no arguments): pick a Python process to attach to, type a
command to launch, or open a recorded session. ``run_home()`` returns the choice; the CLI acts.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static

from sofa_top.collectors.discovery import PyProc, PythonProcessScanner, sort_processes
from sofa_top.tui.formatting import cmdline_text, human_bytes, percent, truncate

if TYPE_CHECKING:
    from sofa_top.recording.catalogue import SessionEntry, SessionInfo

REFRESH_S = 2.0
MAX_SESSIONS = 100
NONE_KEY = "-"  # the row key of a "nothing here" placeholder row

DIM = Style(color="grey62", italic=True)
KIND_STYLES = {
    "input-bound": Style(color="#d75f5f", bold=True),
    "memory-pressure": Style(color="#d75f5f", bold=True),
    "gpu-underutilized": Style(color="#d7af00"),
    "compute-bound": Style(color="#5faf5f"),
    "python-overhead": Style(color="#5f87d7"),
}


@dataclass(frozen=True, slots=True)
class HomeChoice:
    """What the user picked: ``attach`` a pid, ``launch`` an argv, or ``replay`` a session file."""

    action: Literal["attach", "launch", "replay"]
    pid: int | None = None
    argv: tuple[str, ...] = ()
    path: Path | None = None

    @classmethod
    def attach(cls, pid: int) -> HomeChoice:
        """Attach to a running process."""
        return cls("attach", pid=pid)

    @classmethod
    def launch(cls, argv: Sequence[str]) -> HomeChoice:
        """Launch a command (already split into arguments)."""
        return cls("launch", argv=tuple(argv))

    @classmethod
    def replay(cls, path: Path) -> HomeChoice:
        """Open a recorded session."""
        return cls("replay", path=path)


ProcessScan = Callable[[], list[PyProc]]
SessionList = Callable[[], "list[SessionInfo]"]


def parse_command(text: str) -> list[str]:
    """Split a typed command line like a POSIX shell; ValueError says what is wrong."""
    argv = shlex.split(text)
    if not argv:
        raise ValueError("type a command, e.g. python train.py")
    return argv


def _default_sessions() -> list[SessionInfo]:
    from sofa_top.recording.catalogue import list_sessions

    return list_sessions()


class ProcessesScanned(Message):
    """A scan finished (posted from the scan worker)."""

    def __init__(self, rows: list[PyProc] | None, error: str | None = None) -> None:
        super().__init__()
        self.rows = rows
        self.error = error


class SessionsListed(Message):
    """The saved sessions were read (posted from the worker)."""

    def __init__(self, sessions: list[SessionInfo] | None, error: str | None = None) -> None:
        super().__init__()
        self.sessions = sessions
        self.error = error


def session_date(ts: float | None) -> str:
    """``2023-11-14 22:13`` in local time."""
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


class HomeApp(App[HomeChoice | None]):
    """Process picker, command line and recent sessions; returns the user's choice."""

    CSS_PATH = "home.tcss"
    TITLE = "sofa-top"
    BINDINGS = [
        Binding("tab", "focus_next", "Next", priority=True),
        Binding("r", "refresh", "Refresh"),
        # A priority binding: the app handles it before it hands on the keys behind it, so
        # keys that arrive with "/" in one read (a paste, a page's keys) reach the command line
        Binding("slash", "focus_command", "Command", key_display="/", priority=True),
        Binding("q", "quit_home", "Quit"),
        # Nothing runs yet, so ctrl+c may simply leave.
        Binding("ctrl+c", "quit_home", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        *,
        scan: ProcessScan | None = None,
        sessions: SessionList | None = None,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.scan = scan if scan is not None else PythonProcessScanner()
        self.list_sessions = sessions if sessions is not None else _default_sessions
        self.refresh_s = refresh_s
        self.clock = clock
        self.processes: list[PyProc] = []
        self.sessions: list[SessionEntry] = []  # a comparison's runs are one entry
        self.scans = 0  # finished scans (tests wait on it)
        self.sessions_loaded = False
        self._scanning = threading.Lock()
        self.proc_table: DataTable[Text] = DataTable(
            id="home-procs", cursor_type="row", zebra_stripes=True
        )
        self.command = Input(
            placeholder="python train.py --epochs 3   (enter launches it under sofa-top)",
            id="home-command",
        )
        self.session_table: DataTable[Text] = DataTable(
            id="home-sessions", cursor_type="row", zebra_stripes=True
        )

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(
                ("sofa-top", Style(bold=True)),
                "  attach to a Python process, launch a command, or replay a session",
            ),
            id="home-title",
        )
        yield self.proc_table
        yield self.command
        yield self.session_table
        yield Footer()

    def on_mount(self) -> None:
        self.proc_table.border_title = "Python processes · busiest first"
        self.proc_table.border_subtitle = "⏎ attach"
        self.command.border_title = "launch a command"
        self.session_table.border_title = "recent sessions"
        self.session_table.border_subtitle = "⏎ replay"
        for label, key, width in (
            ("pid", "pid", 8),
            ("CPU%", "cpu", 6),
            ("RSS", "rss", 9),
            ("GPU mem", "gpu", 9),
            ("command", "cmd", None),
        ):
            heading = Text(label, justify="left" if key == "cmd" else "right")
            self.proc_table.add_column(heading, key=key, width=width)
        for label, key, width in (
            ("started", "started", 16),
            ("command", "command", 24),
            ("length", "length", 7),
            ("last verdict", "verdict", None),
        ):
            self.session_table.add_column(label, key=key, width=width)
        self.proc_table.add_row(Text("scanning for Python processes…", DIM), key=NONE_KEY)
        self.session_table.add_row(Text("reading saved sessions…", DIM), key=NONE_KEY)
        self.proc_table.focus()
        self._scan()
        self._load_sessions()
        self.set_interval(self.refresh_s, self._scan)

    def on_resize(self) -> None:
        self.set_class(self.size.height >= 40, "-roomy")
        # The command column takes what the fixed ones leave.
        self._fill_processes()
        self._fill_sessions()

    # -- workers ---------------------------------------------------------------------------------

    @work(thread=True, group="home-scan")
    def _scan(self) -> None:
        # psutil walks /proc: milliseconds to seconds on a busy machine, never on the UI thread.
        if not self._scanning.acquire(blocking=False):
            return  # the previous scan is still running: skip this tick
        try:
            rows = self.scan()
        except Exception as exc:
            self.post_message(ProcessesScanned(None, f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self._scanning.release()
        self.post_message(ProcessesScanned(rows))

    @work(thread=True, group="home-sessions")
    def _load_sessions(self) -> None:
        try:
            sessions = self.list_sessions()
        except Exception as exc:  # a bad directory must not hide the other two choices
            self.post_message(SessionsListed(None, str(exc)))
            return
        self.post_message(SessionsListed(sessions))

    @on(ProcessesScanned)
    def _scanned(self, message: ProcessesScanned) -> None:
        self.scans += 1
        if message.rows is None:
            self.proc_table.border_subtitle = f"scan failed: {message.error}"
            return
        self.processes = sort_processes(message.rows)  # whatever the scanner's order
        self._fill_processes()

    @on(SessionsListed)
    def _listed(self, message: SessionsListed) -> None:
        self.sessions_loaded = True
        if message.sessions is None:
            self.session_table.border_subtitle = f"cannot list sessions: {message.error}"
            self.sessions = []
        else:
            from sofa_top.recording.catalogue import group_sessions

            self.sessions = group_sessions(message.sessions)[:MAX_SESSIONS]
        self._fill_sessions()

    # -- tables ----------------------------------------------------------------------------------

    def _command_width(self, table: DataTable[Text], fixed: int) -> int:
        # Two cells of padding per column and one for the scrollbar (size excludes the border).
        width = table.size.width or self.size.width - 2
        return max(10, width - fixed - 2 * len(table.columns) - 1)

    def _fill_processes(self) -> None:
        table = self.proc_table
        if not table.columns:
            return
        selected = self._selected_key(table)
        width = self._command_width(table, 8 + 6 + 9 + 9)
        table.columns[next(k for k in table.columns if k.value == "cmd")].width = width
        table.clear()
        if not self.processes:
            if self.scans:
                table.add_row(Text("no Python processes found (refreshing)", DIM), key=NONE_KEY)
            return
        for proc in self.processes:
            table.add_row(
                Text(str(proc.pid), justify="right"),
                Text(percent(proc.cpu_percent), justify="right"),
                Text(human_bytes(proc.rss), justify="right"),
                Text(human_bytes(proc.gpu_mem), justify="right"),
                Text(truncate(cmdline_text(proc.cmdline, proc.name), width)),
                key=str(proc.pid),
            )
        # The list re-sorts every 2 s; the highlighted process must stay highlighted.
        if selected is not None:
            keys = [str(p.pid) for p in self.processes]
            if selected in keys:
                table.move_cursor(row=keys.index(selected), animate=False)

    def _fill_sessions(self) -> None:
        table = self.session_table
        if not table.columns or not self.sessions_loaded:
            return
        width = self._command_width(table, 16 + 24 + 7)
        table.columns[next(k for k in table.columns if k.value == "verdict")].width = width
        table.clear()
        if not self.sessions:
            table.add_row(Text("no saved sessions yet", DIM), key=NONE_KEY)
            return
        from sofa_top.recording.catalogue import human_duration

        for index, entry in enumerate(self.sessions):
            info = entry.first
            if info.error is not None:
                cells = [
                    Text(session_date(info.modified)),
                    Text(truncate(info.path.name, 24), DIM),
                    Text("-"),
                    Text(truncate(f"unreadable: {info.error}", width), DIM),
                ]
            else:
                command = info.command or "?"
                verdict = info.verdict or "-"
                if entry.kind == "compare":
                    command = f"compare ({len(entry.runs)} runs): {command}"
                    verdict = f"{info.run_label}: {verdict}"
                length = human_duration(entry.duration_s) + ("…" if entry.recording else "")
                cells = [
                    Text(session_date(entry.started)),
                    Text(truncate(command, 24)),
                    Text(length, justify="right"),
                    Text(
                        truncate(verdict, width),
                        KIND_STYLES.get(info.verdict_kind or "", Style()),
                    ),
                ]
            table.add_row(*cells, key=str(index))

    @staticmethod
    def _selected_key(table: DataTable[Text]) -> str | None:
        if not table.row_count or not table.is_valid_row_index(table.cursor_row):
            return None
        cell = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0))
        return str(cell.row_key.value)

    # -- choices ---------------------------------------------------------------------------------

    @on(DataTable.RowSelected, "#home-procs")
    def _proc_selected(self) -> None:
        self._attach_selected()

    @on(DataTable.RowSelected, "#home-sessions")
    def _session_selected(self) -> None:
        self._replay_selected()

    def _attach_selected(self) -> None:
        key = self._selected_key(self.proc_table)
        if key is None or key == NONE_KEY:
            self.notify("no process to attach to", severity="warning", timeout=3)
            return
        self.choose(HomeChoice.attach(int(key)))

    def _replay_selected(self) -> None:
        key = self._selected_key(self.session_table)
        if key is None or key == NONE_KEY:
            self.notify("no session to open", severity="warning", timeout=3)
            return
        info = self.sessions[int(key)].first  # a comparison: its first run (the baseline)
        if info.error is not None:
            self.notify(f"{info.path.name}: {info.error}", severity="error", timeout=5)
            return
        self.choose(HomeChoice.replay(info.path))

    @on(Input.Submitted, "#home-command")
    def _command_submitted(self, event: Input.Submitted) -> None:
        try:
            argv = parse_command(event.value)
        except ValueError as exc:
            self.notify(f"cannot parse the command: {exc}", severity="error", timeout=5)
            return
        self.choose(HomeChoice.launch(argv))

    def choose(self, choice: HomeChoice) -> None:
        """Act on the user's choice: here, return it (the served home hands it to its owner)."""
        self.exit(choice)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In the command line, "/" is text (a path), not the jump to it."""
        return not (action == "focus_command" and self.focused is self.command)

    def action_focus_command(self) -> None:
        """Jump to the command line."""
        # At once, not ``focus()``'s deferred call: the keys behind "/" follow it at once.
        self.screen.set_focus(self.command)

    def action_refresh(self) -> None:
        """Rescan processes and re-read the sessions now."""
        self._scan()
        self._load_sessions()

    def action_quit_home(self) -> None:
        """Leave without choosing."""
        self.exit(None)


def run_home() -> HomeChoice | None:
    """Run the home screen; the choice, or None when the user quit."""
    return HomeApp().run()
