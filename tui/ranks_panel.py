"""Ranks pane: one row per rank of a distributed job (step time, input wait, compute, collective
wait, its own verdict), the straggler highlighted. The dashboard shows it only when the job has
ranks; ``sofa-top cluster`` shows the ranks of every node a Prometheus server scrapes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size

from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import StragglerEvidence
from sofa_top.tui.line_cache import LineCachedWidget, QuietTitles
from sofa_top.tui.steps_panel import human_seconds

HEADER_STYLE = Style(bold=True)
STRAGGLER_STYLE = Style(color="white", bgcolor="#875f00", bold=True)
EXITED_STYLE = Style(color="grey50", strike=True)
WAITING = Style(color="grey62", italic=True)
MAX_ROWS = 8  # in the dashboard the pane grows up to this many ranks, then scrolls


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def straggler_key(verdict: Verdict | None) -> tuple[object, object, object] | None:
    """(run, rank, node) of the straggler the verdict names (None: no straggler)."""
    if verdict is None or not isinstance(verdict.evidence, StragglerEvidence):
        return None
    ev = verdict.evidence
    return ev.run, ev.rank, ev.node


WAITS_FOR = 0.30  # a rank waiting this share of its step in collectives waits for the straggler


def _verdict_cell(s: RankStat, straggler: tuple[object, object, object] | None) -> str:
    text = "-"
    if s.verdict is not None and s.steps:
        cause, kind = s.cause, s.verdict.kind
        text = f"{kind} ({cause})" if cause and cause != kind else kind
        waits = s.collective_wait_fraction or 0.0
        if straggler is not None and not _is(straggler, s) and waits >= WAITS_FOR:
            # its own verdict describes the little time it does not spend waiting
            text = f"waits for rank {straggler[1]} · {text}"
    if not s.alive:
        text = f"✗ {s.exit or 'exited'}" + ("" if text == "-" else f" · {text}")
    return text


def _is(straggler: tuple[object, object, object] | None, s: RankStat) -> bool:
    if straggler is None:
        return False
    run, rank, node = straggler
    return run in (None, s.run or None) and (rank, node) == (s.rank, s.node)


def rank_rows(
    ranks: Sequence[RankStat], straggler: tuple[object, object, object] | None, with_run: bool
) -> list[tuple[tuple[str, ...], Style | str]]:
    """The cells of each rank and its style (the straggler stands out, exited ranks fade)."""
    rows: list[tuple[tuple[str, ...], Style | str]] = []
    # the straggler first: in a pane of many ranks it is the row to see
    for s in sorted(ranks, key=lambda s: not _is(straggler, s)):
        cells = (
            *((s.run,) if with_run else ()),
            str(s.rank),
            s.node,
            "-" if s.local_rank is None else str(s.local_rank),
            str(s.pid),
            human_seconds(s.step_s) if s.step_s else "-",
            _pct(s.input_wait_fraction),
            _pct(s.compute_fraction),
            _pct(s.collective_wait_fraction),
            _verdict_cell(s, straggler),
        )
        style: Style | str = (
            STRAGGLER_STYLE if _is(straggler, s) else "" if s.alive else EXITED_STYLE
        )
        rows.append((cells, style))
    return rows


HEADINGS = ("rank", "node", "local", "pid", "step", "input", "compute", "coll", "verdict")
RIGHT = {"rank", "local", "pid", "step", "input", "compute", "coll"}


def rank_lines(
    ranks: Sequence[RankStat], verdict: Verdict | None, width: int, *, with_run: bool = False
) -> list[Text]:
    """The table, line by line, fitted to ``width`` (the verdict column takes what is left)."""
    headings = (("run",) if with_run else ()) + HEADINGS
    rows = rank_rows(ranks, straggler_key(verdict), with_run)
    table = [(headings, HEADER_STYLE), *rows]
    widths = [max(cell_len(cells[i]) for cells, _ in table) for i in range(len(headings))]
    widths[-1] = max(1, width - (sum(widths) - widths[-1]) - (len(headings) - 1))
    lines: list[Text] = []
    for cells, style in table:
        line = Text(style=style, end="", no_wrap=True)
        for i, (cell, cell_w) in enumerate(zip(cells, widths, strict=True)):
            if i:
                line.append(" ")
            text = Text(cell)
            text.truncate(cell_w, overflow="ellipsis")
            if headings[i] in RIGHT:
                text.pad_left(cell_w - text.cell_len)
            else:
                text.pad_right(cell_w - text.cell_len)
            line.append_text(text)
        line.truncate(width, overflow="ellipsis")
        lines.append(line)
    return lines


class RanksBody(LineCachedWidget):
    """Draws the table: a header and one line per rank."""

    DEFAULT_CSS = """
    RanksBody { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None, with_run: bool = False) -> None:
        super().__init__(id=id)
        self.ranks: tuple[RankStat, ...] = ()
        self.verdict: Verdict | None = None
        self.with_run = with_run

    def show(self, ranks: tuple[RankStat, ...], verdict: Verdict | None) -> None:
        """Replace what is drawn."""
        relayout = len(ranks) != len(self.ranks)
        self.ranks, self.verdict = ranks, verdict
        if relayout:
            self.refresh(layout=True)
        else:
            self.redraw()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.ranks) + 1

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())

    def text_lines(self) -> list[Text]:
        """Header and rows (see ``rank_lines``)."""
        if not self.ranks:
            return [Text("no ranks yet", WAITING)]
        return rank_lines(self.ranks, self.verdict, max(1, self.size.width), with_run=self.with_run)


class RanksPane(VerticalScroll, QuietTitles, can_focus=True):
    """The ranks pane (scrolls past ``MAX_ROWS`` ranks)."""

    def __init__(self, *, id: str | None = None, with_run: bool = False) -> None:
        super().__init__(id=id)
        self.border_title = "ranks"
        self.body = RanksBody(id=f"{id}-body" if id else None, with_run=with_run)

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, ranks: tuple[RankStat, ...], verdict: Verdict | None) -> None:
        """Draw ``ranks``; the title counts them, the nodes and the exited ones."""
        self.body.show(ranks, verdict)
        nodes = len({(s.run, s.node) for s in ranks})
        exited = sum(1 for s in ranks if not s.alive)
        title = f"ranks {len(ranks)} on {nodes} node{'s' if nodes != 1 else ''}"
        if exited:
            title += f" ({exited} exited)"
        self.set_titles(title)

    @property
    def wanted_height(self) -> int:
        """Rows to show without scrolling (up to ``MAX_ROWS``), with the header and border."""
        return min(len(self.body.ranks), MAX_ROWS) + 3
