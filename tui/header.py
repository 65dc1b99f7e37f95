"""Dashboard header: target, elapsed time, recording state and the session file."""

from __future__ import annotations

import time

from rich.style import Style
from rich.text import Text
from textual.geometry import Size

from sofa_top.datamodel.samples import agent_state
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.tui.formatting import cmdline_text, human_duration, truncate, truncate_left
from sofa_top.tui.line_cache import LineCachedWidget

STALE_AFTER_S = 5.0  # snapshots come about once a second; five missed ones is worth saying
REC_STYLE = Style(color="red", bold=True)
INJECTED_STYLE = Style(color="green", bold=True)
STALE_STYLE = Style(color="yellow", bold=True)
PAUSED_STYLE = Style(color="black", bgcolor="yellow", bold=True)
REPLAY_STYLE = Style(color="black", bgcolor="cyan", bold=True)
DIM = Style(color="grey62")
BOLD = Style(bold=True)


class DashboardHeader(LineCachedWidget):
    """Two lines: who is profiled and for how long; where the session is being written."""

    DEFAULT_CSS = """
    DashboardHeader { height: 2; width: 1fr; }
    """

    def __init__(self, session_path: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.session_path = session_path
        self.snapshot: Snapshot | None = None
        self.paused = False
        self.now: float | None = None
        self.status: str | None = None  # e.g. "stopping: finalizing the session…"
        self.replay = False  # a recorded session: the cursor, not the clock, sets the time
        self.replay_end: float | None = None  # last recorded instant (replay)
        self.following = False  # replay cursor follows the end of the file

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 2

    def update_state(
        self,
        *,
        snapshot: Snapshot | None = None,
        paused: bool | None = None,
        now: float | None = None,
        status: str | None = None,
        replay_end: float | None = None,
        following: bool | None = None,
    ) -> None:
        """Change what the header shows (arguments left as None keep their value)."""
        if snapshot is not None:
            self.snapshot = snapshot
            self.session_path = snapshot.session_path or self.session_path
        if paused is not None:
            self.paused = paused
        if now is not None:
            self.now = now
        if status is not None:
            self.status = status
        if replay_end is not None:
            self.replay_end = replay_end
        if following is not None:
            self.following = following
        # Only a line whose text changed is repainted (the clock changes once a second).
        self.redraw()

    def state_text(self) -> Text:
        """The recording indicator: ● REC, paused view, or not recording."""
        if self.status:
            return Text(f" {self.status} ", PAUSED_STYLE)
        if self.replay:
            return Text(" ◆ REPLAY ", REPLAY_STYLE)
        if self.paused:
            return Text(" ❚❚ paused view ", PAUSED_STYLE)
        if self.snapshot is None:
            return Text("○ starting", DIM)
        if not self.snapshot.recording:
            return Text("○ not recording", DIM)
        if self.now is not None and self.now - self.snapshot.ts > STALE_AFTER_S:
            return Text(f"○ no data for {human_duration(self.now - self.snapshot.ts)}", STALE_STYLE)
        return Text("● REC", REC_STYLE)

    def cursor_text(self, snapshot: Snapshot) -> Text:
        """Replay position: ``at 1:23 / 5:00 (14:03:22)``; ``live end`` while following."""
        at = Text.assemble(("at ", DIM), (human_duration(snapshot.ts - snapshot.started), BOLD))
        if self.replay_end is not None:
            at.append(f" / {human_duration(self.replay_end - snapshot.started)}", DIM)
        clock = time.strftime("%H:%M:%S", time.localtime(snapshot.ts))
        at.append(f" ({clock}{', end' if self.following else ''})", DIM)
        return at

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())

    def text_lines(self) -> list[Text]:
        """Who and for how long; the session file."""
        width = max(1, self.size.width)
        state = self.state_text()
        snapshot = self.snapshot
        if snapshot is None:
            who = Text("sofa-top · waiting for the first snapshot…", DIM)
            elapsed = Text("")
        else:
            target = snapshot.target
            if self.replay:
                elapsed = self.cursor_text(snapshot)
            else:
                seconds = (self.now if self.now is not None else snapshot.ts) - snapshot.started
                elapsed = Text.assemble(("elapsed ", DIM), (human_duration(seconds), BOLD))
            who = Text.assemble(("pid ", DIM), (str(target.pid), BOLD), " ")
            if agent_state(target.launched, snapshot.agent) == "injected":
                # attach mode has an agent only when sofa-top injected it
                who.append("agent injected ", INJECTED_STYLE)
            command = cmdline_text(target.cmdline, target.name)
            # Everything else on the line is short; the command line gets what is left.
            room = width - who.cell_len - elapsed.cell_len - state.cell_len - 4
            who.append(truncate(command, max(room, 0)))
        first = Text.assemble(state, "  ", who)
        pad = width - first.cell_len - elapsed.cell_len
        if pad > 0:
            first.append(" " * pad)
        first.append_text(elapsed)
        first.truncate(width)
        label = "session "
        second = Text.assemble((label, DIM), truncate_left(self.session_path, width - len(label)))
        second.truncate(width)
        return [first, second]
