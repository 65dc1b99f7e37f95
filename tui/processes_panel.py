"""Processes pane: the target and its descendants, one row each, in tree order."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size

from sofa_top.datamodel.samples import ProcessSample, ProcInfo
from sofa_top.tui.formatting import human_bytes, human_bytes_short, percent
from sofa_top.tui.line_cache import LineCachedWidget, QuietTitles

EXITED_STYLE = Style(color="grey50", strike=True)
TARGET_STYLE = Style(bold=True)
HEADER_STYLE = Style(bold=True)
WIDE = 44  # inner width from which long units and state words fit
# Narrow panes show the state as one letter, like top's S column.
STATE_LETTERS = {
    "running": "R",
    "sleeping": "S",
    "disk-sleep": "D",
    "zombie": "Z",
    "stopped": "T",
    "tracing-stop": "t",
    "idle": "I",
    "dead": "X",
    "waking": "W",
    "parked": "P",
}


def tree_order(procs: Sequence[ProcInfo], target: int) -> list[tuple[ProcInfo, int]]:
    """Processes depth-first from ``target`` (children by pid), with their depth.

    Processes whose parent is not in the tree (re-parented orphans) follow at depth 0.
    """
    by_parent: dict[int, list[ProcInfo]] = {}
    pids = {p.pid for p in procs}
    for proc in procs:
        by_parent.setdefault(proc.ppid, []).append(proc)
    for children in by_parent.values():
        children.sort(key=lambda p: p.pid)
    ordered: list[tuple[ProcInfo, int]] = []
    seen: set[int] = set()

    def visit(proc: ProcInfo, depth: int) -> None:
        if proc.pid in seen:
            return
        seen.add(proc.pid)
        ordered.append((proc, depth))
        for child in by_parent.get(proc.pid, []):
            visit(child, depth + 1)

    roots = [p for p in procs if p.pid == target]
    roots += sorted(
        (p for p in procs if p.pid != target and p.ppid not in pids), key=lambda p: p.pid
    )
    for root in roots:
        visit(root, 0)
    for proc in sorted(procs, key=lambda p: p.pid):
        visit(proc, 0)  # cycles in ppid data must not hide a process
    return ordered


# Per column: heading (narrow, wide), justification.
_COLUMNS: tuple[tuple[str, str, JustifyMethod], ...] = (
    ("pid", "pid", "right"),
    ("role", "role", "left"),
    ("CPU%", "CPU%", "right"),
    ("RSS", "RSS", "right"),
    ("thr", "thr", "right"),
    ("S", "state", "left"),
)
ROLE = 1  # the column that takes the width the others leave
STATE_MAX = 10  # widest state column


def process_rows(sample: ProcessSample, width: int) -> list[tuple[tuple[str, ...], Style | str]]:
    """The cells and row style of each process, in tree order, as drawn at ``width``."""
    wide = width >= WIDE
    rows: list[tuple[tuple[str, ...], Style | str]] = []
    for proc, depth in tree_order(sample.procs, sample.target_pid):
        exited = not proc.alive or proc.state == "exited"
        role = proc.role or proc.name
        is_rank = proc.rank is not None and role.startswith("rank ")
        if is_rank and wide and proc.rank is not None:
            role = f"{role} · {proc.rank.node}"  # a rank heads its group: its workers follow
        elif is_rank and proc.rank is not None:
            role = f"rank{proc.rank.rank}"
        elif not wide:
            # "DataLoader worker" -> "worker": the last word tells roles apart.
            role = role.split()[-1] if role.strip() else role
        indent = "  " * max(depth - 1, 0) + ("└ " if depth else "")
        rss = human_bytes(proc.rss) if wide else human_bytes_short(proc.rss)
        if wide:
            state = "✗ exited" if exited else proc.state
        else:
            state = "✗" if exited else STATE_LETTERS.get(proc.state, proc.state[:1].upper())
        cells = (
            str(proc.pid),
            indent + role,
            "-" if exited else percent(proc.cpu_percent),
            "-" if exited else rss,
            "-" if exited or proc.num_threads is None else str(proc.num_threads),
            state,
        )
        style = EXITED_STYLE if exited else (TARGET_STYLE if proc.pid == sample.target_pid else "")
        rows.append((cells, style))
    return rows


def process_table(sample: ProcessSample, width: int) -> Table:
    """A rich table of ``sample`` fitted to ``width`` cells."""
    wide = width >= WIDE
    table = Table(
        box=None,
        expand=True,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("role", ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column("CPU%", justify="right", no_wrap=True)
    table.add_column("RSS", justify="right", no_wrap=True)
    table.add_column("thr", justify="right", no_wrap=True)
    table.add_column(
        "state" if wide else "S", no_wrap=True, overflow="ellipsis", max_width=STATE_MAX
    )
    for cells, style in process_rows(sample, width):
        # Text, not str: a process name like "[worker]" must not be read as rich markup.
        table.add_row(*(Text(cell) for cell in cells), style=style)
    return table


def process_lines(sample: ProcessSample, width: int) -> list[Text] | None:
    """``process_table`` laid out line by line, as rich lays it out (None: too narrow).

    Rich measures every cell and renders the table whole, every second; the columns are
    simple enough to lay out directly: each as wide as its widest cell (the state column at
    most ``STATE_MAX``), one space between them, the role column taking what is left.
    """
    wide = width >= WIDE
    rows = process_rows(sample, width)
    header = tuple(wide_heading if wide else heading for heading, wide_heading, _ in _COLUMNS)
    table: list[tuple[tuple[str, ...], Style | str]] = [(header, HEADER_STYLE), *rows]
    widths = [max(cell_len(cells[i]) for cells, _ in table) for i in range(len(_COLUMNS))]
    widths[-1] = min(widths[-1], STATE_MAX)
    widths[ROLE] = width - (sum(widths) - widths[ROLE]) - (len(_COLUMNS) - 1)
    if widths[ROLE] < 1:
        return None  # rich shrinks every column then: leave that to process_table
    lines: list[Text] = []
    for cells, style in table:
        line = Text(style=style, end="")
        for index, (cell, (_, _, justify), cell_w) in enumerate(
            zip(cells, _COLUMNS, widths, strict=True)
        ):
            if index:
                line.append(" ")
            line.append_text(_fit(cell, cell_w, justify))
        lines.append(line)
    return lines


def _fit(cell: str, width: int, justify: JustifyMethod) -> Text:
    # What rich does to a no-wrap, ellipsis-overflow table cell (Text.wrap, Lines.justify).
    text = Text(cell)
    if justify == "right":
        text.rstrip()
        text.truncate(width, overflow="ellipsis")
        text.pad_left(width - text.cell_len)
    else:
        text.truncate(width, overflow="ellipsis", pad=True)
    text.truncate(width, overflow="ellipsis")
    return text


class ProcessesBody(LineCachedWidget):
    """Draws the table; one line per process plus the header."""

    DEFAULT_CSS = """
    ProcessesBody { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sample: ProcessSample | None = None

    def show(self, sample: ProcessSample | None) -> None:
        """Replace what is drawn."""
        before = self._lines()
        self.sample = sample
        if self._lines() != before:
            # A layout pass repaints the whole screen: only when the row count changed.
            self.refresh(layout=True)
        else:
            self.redraw()

    def _lines(self) -> int:
        if self.sample is None or not self.sample.procs:
            return 1
        return len(self.sample.procs) + 1

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._lines()

    def render(self) -> Table | Text:
        sample = self.sample
        if sample is None:
            return Text("waiting for the first process reading…", Style(color="grey62"))
        if not sample.procs:
            return Text(sample.error or "no processes", Style(color="grey62"))
        return process_table(sample, self.size.width)

    def text_lines(self) -> list[Text] | None:
        """The table line by line (a process whose figures did not change is not redrawn)."""
        sample = self.sample
        if sample is None or not sample.procs:
            rendered = self.render()
            return [rendered] if isinstance(rendered, Text) else None
        return process_lines(sample, self.size.width)


class ProcessesPane(VerticalScroll, QuietTitles, can_focus=True):
    """The processes pane (scrolls when the tree is taller than the pane)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "processes"

    def compose(self) -> ComposeResult:
        yield ProcessesBody(id="processes-body")

    def show(self, sample: ProcessSample | None) -> None:
        """Draw ``sample``; the title counts processes, exited ones and threads."""
        for body in self.query(ProcessesBody):  # none while the pane is still composing
            body.show(sample)
        if sample is None:
            return
        exited = sum(1 for p in sample.procs if not p.alive or p.state == "exited")
        title = f"processes {len(sample.procs) - exited}"
        if exited:
            title += f" (+{exited} exited)"
        threads = f" · {sample.tree_threads} thr" if sample.tree_threads is not None else ""
        # The thread count is the first thing to go in a narrow pane: the title must stay whole.
        if len(title + threads) <= self.size.width - 4 or not self.size.width:
            title += threads
        self.set_titles(title)
