"""Stacks pane: hot functions (sortable), a thread selector and the time split."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.widgets import DataTable, Select, Static

from sofa_top.datamodel.samples import STACK_CLASSES
from sofa_top.datamodel.snapshot import FunctionStat, Snapshot, StackSummary, ThreadStat
from sofa_top.tui.formatting import truncate, truncate_left
from sofa_top.tui.line_cache import QuietRefresh, QuietTitles, update_static
from sofa_top.tui.split_bar import SplitBar, class_style

ALL_THREADS = -1
MAX_ROWS = 200  # more rows than anyone scrolls through; keeps a refresh cheap

ERROR_STYLE = Style(color="red", bold=True)
HINT_STYLE = Style(color="yellow", bold=True)
DIM = Style(color="grey62", italic=True)


@dataclass(frozen=True, slots=True)
class SortColumn:
    """A column of the hot-functions table and how it sorts."""

    key: str
    label: str
    descending: bool  # default direction: biggest numbers first, names A-Z


SORT_COLUMNS: tuple[SortColumn, ...] = (
    SortColumn("own", "own%", True),
    SortColumn("total", "total%", True),
    SortColumn("function", "function", False),
    SortColumn("file", "file:line", False),
    SortColumn("thread", "thread", False),
    SortColumn("class", "class", False),
)
_BY_KEY = {c.key: c for c in SORT_COLUMNS}
# Display order differs from the cycling order: names first, numbers after.
COLUMN_ORDER: tuple[str, ...] = ("function", "file", "own", "total", "thread", "class")

_SORT_KEYS: dict[str, Callable[[FunctionStat], str | float | tuple[str, int] | int]] = {
    "own": lambda f: f.own_pct,
    "total": lambda f: f.total_pct,
    "function": lambda f: f.function.lower(),
    "file": lambda f: (f.filename, f.line),
    "thread": lambda f: f.thread.lower(),
    "class": lambda f: STACK_CLASSES.index(f.klass) if f.klass in STACK_CLASSES else 99,
}


def sort_functions(
    functions: Sequence[FunctionStat], key: str, descending: bool
) -> list[FunctionStat]:
    """Sort by ``key``; ties keep the hottest (own %) first so the order is stable."""
    ordered = sorted(functions, key=lambda f: (-f.own_pct, f.function, f.filename, f.line))
    return sorted(ordered, key=_SORT_KEYS[key], reverse=descending)


def next_sort(key: str) -> SortColumn:
    """The sort column after ``key`` (wrapping around)."""
    keys = [c.key for c in SORT_COLUMNS]
    index = keys.index(key) if key in keys else -1
    return SORT_COLUMNS[(index + 1) % len(SORT_COLUMNS)]


def thread_label(thread: ThreadStat) -> str:
    """How a thread is named in the selector."""
    return f"{thread.name or 'thread'} · tid {thread.tid}"


# One row's cells as plain strings in COLUMN_ORDER (the class names its colour too): cheap to
# compare with what the table already shows.
RowCells = tuple[str, str, str, str, str, str]
BLANK_ROW: RowCells = ("", "", "", "", "", "")


def row_cells(stat: FunctionStat, widths: dict[str, int]) -> RowCells:
    """The cells of ``stat``'s row, fitted to the column ``widths``."""
    return (
        truncate(stat.function, widths["function"]),
        truncate_left(f"{stat.filename}:{stat.line}", widths["file"]),
        f"{stat.own_pct:.1f}",
        f"{stat.total_pct:.1f}",
        truncate(stat.thread, widths["thread"]),
        stat.klass,
    )


def cell_text(column: str, value: str) -> Text:
    """A table cell: numbers right-aligned, the class in its colour; never markup."""
    if column in ("own", "total"):
        return Text(value, justify="right")
    if column == "class":
        return Text(value, style=class_style(value))
    return Text(value)


def column_widths(width: int) -> dict[str, int]:
    """Cell widths for the table at ``width`` cells (cell padding and scrollbar excluded)."""
    thread_w = 16 if width >= 120 else 10
    fixed = {"own": 6, "total": 7, "thread": thread_w, "class": 7}
    # Two cells of padding per column and two for the vertical scrollbar.
    rest = width - sum(fixed.values()) - 2 * len(COLUMN_ORDER) - 2
    function_w = max(8, int(rest * 0.55))
    file_w = max(8, rest - function_w)
    return {"function": function_w, "file": file_w, **fixed}


class HotTable(DataTable[Text | str], QuietRefresh):
    """The hot-functions table; changing a row's cells repaints that row alone.

    ``DataTable.update_cell`` repaints the whole table (every visible row, cell by cell,
    through rich), although the other rows look the same as before.
    """

    def update_row(self, row_key: str, cells: Sequence[tuple[str, Text]]) -> None:
        """Put new values in some cells of a row (pairs of column key and value)."""
        self._quiet = True
        try:
            for column_key, value in cells:
                self.update_cell(row_key, column_key, value)
        finally:
            self._quiet = False
        self.refresh_row(self.get_row_index(row_key))

    def drop_stale_renders(self) -> None:
        """Forget rendered rows, cells and lines from before the last cell updates.

        Each ``update_cell`` makes every cached render stale (their keys hold an update count),
        but they stay in the LRU caches until evicted: tens of MB of dead segments after some
        minutes of updates. ``clear`` and ``_clear_caches`` drop them, but also repaint the
        whole table, which in-place updates are there to avoid."""
        for name in ("_row_render_cache", "_cell_render_cache", "_line_cache"):
            cache = getattr(self, name, None)
            if cache is not None:
                cache.clear()


class StacksPanel(Vertical, QuietTitles, can_focus=False):
    """Hot functions of the selected thread (or all), or why stacks are unavailable."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.thread = ALL_THREADS
        self.sort_key = "own"
        self.descending = True
        self._thread_options: tuple[tuple[str, int], ...] = ()
        self._columns_state: tuple[int, str, bool] | None = None
        # What the table holds: (row key, cell texts and class) per row, in table order.
        self._rows: list[tuple[str, RowCells]] = []
        # Rows kept (blank) when fewer functions come: a table whose row count changes takes
        # a layout pass of the whole screen (and its scrollbar comes and goes) every time.
        self._pad_to = 0
        self.border_title = "hot functions"

    def compose(self) -> ComposeResult:
        with Horizontal(id="stacks-controls"):
            yield Select[int](
                [("all threads", ALL_THREADS)],
                value=ALL_THREADS,
                allow_blank=False,
                compact=True,
                id="thread-select",
            )
            yield SplitBar(id="split-bar")
        yield HotTable(id="hot-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="stacks-message")

    @property
    def table(self) -> HotTable:
        """The hot-functions table."""
        return self.query_one("#hot-table", HotTable)

    # -- state changes -------------------------------------------------------------------------

    def show(self, snapshot: Snapshot | None) -> None:
        """Draw ``snapshot`` with the current thread and sort."""
        self.snapshot = snapshot
        if snapshot is not None:
            self._update_thread_options(snapshot)
        self._redraw()

    def cycle_sort(self) -> SortColumn:
        """Sort by the next column (key ``s``)."""
        column = next_sort(self.sort_key)
        self.set_sort(column.key, column.descending)
        return column

    def set_sort(self, key: str, descending: bool) -> None:
        """Sort the table by column ``key``."""
        self.sort_key = key
        self.descending = descending
        self._redraw()

    def select_thread(self, tid: int) -> None:
        """Show one thread (``ALL_THREADS`` for all)."""
        self.thread = tid
        self._pad_to = 0  # another thread's table: as long as its own functions
        self._redraw()

    @on(Select.Changed, "#thread-select")
    def _thread_changed(self, event: Select.Changed) -> None:
        if isinstance(event.value, int):
            self.select_thread(event.value)

    @on(DataTable.HeaderSelected, "#hot-table")
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in _BY_KEY:
            return
        if key == self.sort_key:
            self.set_sort(key, not self.descending)
        else:
            self.set_sort(key, _BY_KEY[key].descending)

    def on_resize(self, event: Resize) -> None:
        self._redraw()

    # -- drawing -------------------------------------------------------------------------------

    def _update_thread_options(self, snapshot: Snapshot) -> None:
        threads = snapshot.stacks.threads if snapshot.stacks is not None else ()
        options = tuple(
            (thread_label(t), t.tid) for t in sorted(threads, key=lambda t: (t.pid, t.tid))
        )
        # A thread that stopped appearing stays selectable while it is selected.
        if self.thread != ALL_THREADS and self.thread not in {tid for _, tid in options}:
            options += ((f"tid {self.thread} (no samples)", self.thread),)
        if options == self._thread_options:
            return
        self._thread_options = options
        select: Select[int] = self.query_one("#thread-select", Select)
        # set_options resets the value; restoring it must not look like a user choice.
        # Text prompts: a thread name is never markup.
        with select.prevent(Select.Changed):
            select.set_options(
                [(Text("all threads"), ALL_THREADS), *((Text(n), t) for n, t in options)]
            )
            select.value = self.thread

    def current_summary(self) -> StackSummary | None:
        """The summary for the selected thread (or all threads)."""
        if self.snapshot is None:
            return None
        if self.thread == ALL_THREADS:
            return self.snapshot.stacks
        return self.snapshot.stacks_by_thread.get(self.thread)

    def _message(self, text: Text | None) -> None:
        message = self.query_one("#stacks-message", Static)
        table = self.table
        if text is None:
            message.display = False
            table.display = True
        else:
            update_static(message, text)
            message.display = True
            table.display = False

    def _redraw(self) -> None:
        bars = self.query(SplitBar)
        if not self.is_mounted or not bars:
            return  # its children are not mounted yet: the next snapshot draws it
        snapshot = self.snapshot
        split_bar = bars.first()
        window = snapshot.last_stack_window if snapshot is not None else None
        summary = self.current_summary()
        self._update_titles(summary)
        if window is not None and window.error:
            text = Text.assemble(("stacks unavailable: ", ERROR_STYLE), window.error)
            if window.hint:
                text.append("\n\n")
                text.append("how to fix: ", HINT_STYLE)
                text.append(window.hint)
            text.append("\n\nThe other panes keep working.", DIM)
            split_bar.show(None)
            self._message(text)
            return
        if summary is None:
            waiting = (
                "waiting for stack samples…"
                if self.thread == ALL_THREADS
                else f"no samples for tid {self.thread} in the recent window"
            )
            split_bar.show(None)
            self._message(Text(waiting, DIM))
            return
        split_bar.show(summary.split)
        self._message(None)
        self._populate(sort_functions(summary.functions, self.sort_key, self.descending))

    def _update_titles(self, summary: StackSummary | None) -> None:
        who = "all threads" if self.thread == ALL_THREADS else f"tid {self.thread}"
        title = f"hot functions · {who}"
        subtitle = f"sort: {_BY_KEY[self.sort_key].label} {'▼' if self.descending else '▲'} (s)"
        if summary is not None:
            span = max(0.0, summary.ts_end - summary.ts_start)
            title += f" · {summary.rate_hz:.0f} Hz · {summary.thread_samples} samples/{span:.0f}s"
            if summary.sampler_cpu is not None:
                subtitle = f"py-spy {summary.sampler_cpu:.1f}% CPU · {subtitle}"
        self.set_titles(title, subtitle)

    def _ensure_columns(self, width: int) -> dict[str, int]:
        widths = column_widths(width)
        state = (width, self.sort_key, self.descending)
        if state == self._columns_state:
            return widths
        self._columns_state = state
        table = self.table
        table.clear(columns=True)
        self._rows = []
        self._pad_to = 0
        arrow = "▼" if self.descending else "▲"
        for key in COLUMN_ORDER:
            label = _BY_KEY[key].label + (arrow if key == self.sort_key else "")
            style = "bold underline" if key == self.sort_key else ""
            heading = Text(
                label, style=style, justify="right" if key in ("own", "total") else "left"
            )
            table.add_column(heading, key=key, width=widths[key])
        return widths

    def _populate(self, functions: list[FunctionStat]) -> None:
        table = self.table
        width = table.size.width or max(self.size.width - 2, 40)
        # Before the columns change (a new sort rebuilds them): the cursor stays on its function.
        cursor_key: str | None = None
        if self._rows and table.is_valid_row_index(table.cursor_row):
            cursor_key = self._rows[table.cursor_row][0]
        widths = self._ensure_columns(width)
        rows: list[tuple[str, RowCells]] = []
        seen: set[str] = set()
        for stat in functions[:MAX_ROWS]:
            key = f"{stat.function}|{stat.filename}|{stat.line}"
            if key in seen:
                key = f"{key}|{len(rows)}"
            seen.add(key)
            rows.append((key, row_cells(stat, widths)))
        if self._rows and len(rows) < self._pad_to:
            rows += [("", BLANK_ROW)] * (self._pad_to - len(rows))
        self._pad_to = max(self._pad_to, len(rows))
        old = self._rows
        if rows == old:
            return  # every repaint of the table costs: most seconds the numbers stay put
        self._rows = rows
        keys = [key for key, _ in rows]
        if len(rows) == len(old):
            # Rows are keyed by position: a function moving up or down changes the cells of
            # the rows it passes, and only those are repainted (a rebuild re-measures every
            # cell and repaints the whole table; hot functions swap places most seconds).
            for i, ((_, cells), (_, before)) in enumerate(zip(rows, old, strict=True)):
                if cells != before:
                    table.update_row(
                        f"r{i}",
                        [
                            (column, cell_text(column, value))
                            for column, value, previous in zip(
                                COLUMN_ORDER, cells, before, strict=True
                            )
                            if value != previous
                        ],
                    )
            table.drop_stale_renders()
        else:
            table.clear()
            for i, (_, cells) in enumerate(rows):
                table.add_row(
                    *(
                        cell_text(column, value)
                        for column, value in zip(COLUMN_ORDER, cells, strict=True)
                    ),
                    key=f"r{i}",
                )
        # Refreshing every second must not yank the cursor away from its function.
        if cursor_key is not None and cursor_key in keys:
            row = keys.index(cursor_key)
            if row != table.cursor_row:
                table.move_cursor(row=row, animate=False)
