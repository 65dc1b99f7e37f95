"""``sofa-top cluster`` on a terminal: every run's straggler verdict and the ranks of all its
nodes, read back from Prometheus every few seconds (in a worker thread)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Footer, Static

from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import StragglerEvidence
from sofa_top.metrics.cluster import ClusterRun
from sofa_top.tui.ranks_panel import RanksPane
from sofa_top.tui.verdict_panel import badge, headline

REFRESH_S = 2.0
DIM = Style(color="grey62")


class Fetched(Message):
    """A refresh came back: the runs, or the one line saying why not."""

    def __init__(self, runs: list[ClusterRun] | None, error: str | None) -> None:
        super().__init__()
        self.runs = runs
        self.error = error


def verdict_text(run: ClusterRun, width: int) -> Text:
    """``run NAME  STRAGGLER  rank 2 ...``: one line per run."""
    text = Text.assemble((f"run {run.run} ", Style(bold=True)))
    if run.verdict is None:
        text.append("fewer than two ranks with steps", DIM)
    else:
        text.append_text(badge(run.verdict))
        text.append(" ")
        text.append(headline(run.verdict))
    text.truncate(width, overflow="ellipsis")
    return text


def worst(runs: list[ClusterRun]) -> Verdict | None:
    """The straggler that costs its job the most, tagged with its run (the pane highlights it)."""
    best: tuple[float, Verdict] | None = None
    for r in runs:
        v = r.verdict
        if v is None or not isinstance(v.evidence, StragglerEvidence):
            continue
        cost = v.evidence.speedup_if_matched
        if best is None or cost > best[0]:
            tagged = dataclasses.replace(v.evidence, run=r.run)
            best = (cost, dataclasses.replace(v, evidence=tagged))
    return None if best is None else best[1]


class ClusterApp(App[None]):
    """Live view of a cluster's ranks."""

    CSS = """
    #cluster-header { height: 1; padding: 0 1; background: $panel; }
    #cluster-verdicts { height: auto; max-height: 8; padding: 0 1; background: $boost; }
    #cluster-ranks { height: 1fr; padding: 0 1; border: round $primary-darken-2; }
    """
    BINDINGS = [Binding("r", "refresh", "Refresh"), Binding("q", "quit", "Quit")]

    def __init__(
        self,
        fetch: Callable[[], list[ClusterRun]],
        first: list[ClusterRun],
        url: str,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__()
        self.fetch = fetch
        self.runs = first
        self.url = url
        self.refresh_s = refresh_s
        self.error: str | None = None
        self.updated = time.time()
        self.header = Static(id="cluster-header")
        self.verdicts = Static(id="cluster-verdicts")
        self.ranks = RanksPane(id="cluster-ranks", with_run=True)

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.verdicts
        yield self.ranks
        yield Footer()

    def on_mount(self) -> None:
        self.title = "sofa-top cluster"
        self.draw()
        self.set_interval(self.refresh_s, self.action_refresh)

    def draw(self) -> None:
        """Show the latest runs (and the last refresh's error, if it failed)."""
        when = time.strftime("%H:%M:%S", time.localtime(self.updated))
        status = Text.assemble(("sofa-top cluster ", Style(bold=True)), f"{self.url} · {when}")
        if self.error:
            status.append(f" · {self.error}", Style(color="red"))
        self.header.update(status)
        width = max(20, self.size.width - 2)
        self.verdicts.update(Text("\n").join(verdict_text(r, width) for r in self.runs))
        ranks: tuple[RankStat, ...] = tuple(s for r in self.runs for s in r.ranks)
        self.ranks.show(ranks, worst(self.runs))

    def action_refresh(self) -> None:
        """Read Prometheus again."""
        self._fetch()

    @work(thread=True, exclusive=True, group="cluster-fetch")
    def _fetch(self) -> None:
        try:
            self.post_message(Fetched(self.fetch(), None))
        except UserError as exc:
            self.post_message(Fetched(None, str(exc)))

    @on(Fetched)
    def _fetched(self, message: Fetched) -> None:
        self.error = message.error
        if message.runs is not None:
            self.runs = message.runs
            self.updated = time.time()
        self.draw()


def run_cluster(fetch: Callable[[], list[ClusterRun]], first: list[ClusterRun], url: str) -> None:
    """Run the cluster view until the user quits."""
    ClusterApp(fetch, first, url).run()
