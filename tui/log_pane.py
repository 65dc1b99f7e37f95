"""Log view: the launched workload's stdout/stderr, bounded, stderr in colour."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from sofa_top.datamodel.samples import Event
from sofa_top.datamodel.snapshot import LOG_LINES, Snapshot
from sofa_top.tui.line_cache import QuietTitles, update_static

STDERR_STYLE = Style(color="#ff8787")
DIM = Style(color="grey62", italic=True)
DROPPED_STYLE = Style(color="yellow", bold=True)

REPLAY_MESSAGE = "the workload's output is not shown in a replay"
ATTACH_MESSAGE = (
    "workload output is captured in launch mode only: sofa-top launch -- CMD "
    "(attached processes keep writing to their own terminal)"
)


def log_line(event: Event) -> Text:
    """One output line; stderr lines are coloured, and nothing in them is read as markup."""
    stderr = event.data.get("stream") == "stderr"
    return Text(event.message, STDERR_STYLE if stderr else Style(), no_wrap=True)


class LogPane(Vertical, QuietTitles):
    """A status line and a scrollable, bounded log that follows new lines while at the bottom."""

    def __init__(self, *, max_lines: int = LOG_LINES, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.border_title = "workload output"
        self.status = Static(id="log-status")
        self.log_view = RichLog(max_lines=max_lines, wrap=False, markup=False, id="log-view")
        self.log_view.auto_scroll = False  # we decide: follow only while at the bottom
        self._last: Event | None = None  # newest line written, to append only what is new
        self.written = 0  # lines written since the last reset (tests, the title)
        self.stderr_lines = 0
        self.replay = False

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.log_view

    def show(self, snapshot: Snapshot) -> None:
        """Append the lines of ``snapshot`` not shown yet; say how many were dropped."""
        logs = snapshot.logs
        new = self._new_lines(logs)
        view = self.log_view
        # Follow new lines only while the user has not scrolled up to read something.
        follow = view.is_vertical_scroll_end or view.max_scroll_y == 0
        for event in new:
            # Per write: a hidden view defers rendering, and the flag travels with the line.
            view.write(log_line(event), scroll_end=follow)
            self.written += 1
            if event.data.get("stream") == "stderr":
                self.stderr_lines += 1
        if logs:
            self._last = logs[-1]
        status = Text()
        if not logs and (self.replay or snapshot.read_only):
            status.append(REPLAY_MESSAGE, DIM)
        elif not logs and not snapshot.target.launched:
            status.append(ATTACH_MESSAGE, DIM)
        else:
            kept = min(self.written, self.max_lines)
            status.append(f"{kept} lines", Style(bold=True))
            if self.stderr_lines:
                status.append(" · ")
                status.append(f"{self.stderr_lines} on stderr", STDERR_STYLE)
            if snapshot.logs_dropped > 0:
                status.append(" · ")
                status.append(f"{snapshot.logs_dropped} lines dropped", DROPPED_STYLE)
                status.append(" (flood protection)", DIM)
            if not logs and not snapshot.log_progress:
                status.append(" · no output yet", DIM)
        for event in snapshot.log_progress:  # a progress bar: one line, updated in place
            status.append("\n")
            status.append_text(log_line(event))
        update_static(self.status, status)
        dropped = f" · {snapshot.logs_dropped} dropped" if snapshot.logs_dropped else ""
        self.set_titles(f"workload output{dropped}")

    def _new_lines(self, logs: tuple[Event, ...]) -> tuple[Event, ...]:
        """The lines after the newest one already written (all of them after a reset)."""
        last = self._last
        if last is None:
            return logs
        # The hub hands the same Event objects each time; identity survives equal lines.
        for index in range(len(logs) - 1, -1, -1):
            if logs[index] is last:
                return logs[index + 1 :]
        if logs and logs[-1].ts < last.ts:
            # Older than what is shown (a replay moved back): start over.
            self.reset()
            return logs
        # What was shown scrolled out of the source's window between two snapshots.
        return tuple(e for e in logs if e.ts > last.ts)

    def reset(self) -> None:
        """Forget what was written."""
        self.log_view.clear()
        self._last = None
        self.written = 0
        self.stderr_lines = 0
