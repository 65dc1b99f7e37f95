"""``sofa-top cluster``: a cluster's ranks and straggler verdict, read back from Prometheus."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from sofa_top.metrics.cluster import ClusterRun, Prometheus, cluster_json, read_cluster


def cluster_main(args: argparse.Namespace) -> int:
    """``--json``: print once; on a terminal: a live view (refreshed every few seconds);
    piped: the same once as text. Bad input (a bad URL, an unreachable server, a run that
    matches nothing) is one line and exit 1 (``UserError``)."""
    prom = Prometheus(args.prometheus)
    runs = read_cluster(prom, args.run, args.lookback)
    if args.json:
        json.dump(cluster_json(runs, prom.url, args.lookback), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not sys.stdout.isatty():
        render_runs(runs)
        return 0
    from sofa_top.tui.cluster_app import run_cluster

    run_cluster(lambda: read_cluster(prom, args.run, args.lookback), runs, prom.url)
    return 0


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def render_runs(runs: list[ClusterRun]) -> None:
    """Each run's verdict and ranks, for people."""
    con = Console()
    for r in runs:
        headline = (
            r.verdict.headline if r.verdict is not None else "fewer than two ranks with steps"
        )
        con.print(f"[bold]run {r.run}[/]: {headline}")
        table = Table("rank", "node", "local", "pid", "step", "input", "compute", "coll", "verdict")
        for s in r.ranks:
            table.add_row(
                str(s.rank),
                s.node,
                "-" if s.local_rank is None else str(s.local_rank),
                str(s.pid),
                "-" if s.step_s is None else f"{s.step_s * 1000:.1f} ms",
                _pct(s.input_wait_fraction),
                _pct(s.compute_fraction),
                _pct(s.collective_wait_fraction),
                s.verdict.headline if s.verdict is not None else "-",
            )
        con.print(table)
