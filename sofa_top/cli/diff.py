"""``sofa-top diff A B [--threshold PCT] [--json] [--all]``: two sessions or two compare results
side by side; with ``--threshold`` the exit status says whether B regressed (1) against A, for a
CI job to gate on (2: bad input)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sofa_top.datamodel.errors import UserError
from sofa_top.recording.diff import Diff, Kind, Row, diff, read_json

EXIT_REGRESSED = 1


def add_diff_parser(sub: Any) -> None:
    """The ``diff`` command's parser."""
    d = sub.add_parser(
        "diff",
        help="two sessions (or two compare --json results) side by side; gate CI on regressions",
        usage="sofa-top diff A B [--threshold PCT] [--json] [--all]",
        description="A and B: session files, names or 'last', or files written by 'record "
        "--json' or 'compare --json' (both of one kind). Rows: per step phase (median, p90, "
        "p99, input wait), the verdict field by field, CPU and memory, the exit code; for "
        "compare results, each configuration's throughput. Exit status: 0, or 1 when B "
        "regressed past --threshold, 2 for bad input.",
    )
    d.add_argument("a", metavar="A", help="the baseline")
    d.add_argument("b", metavar="B", help="the run to judge against A")
    d.add_argument(
        "--threshold",
        type=_percent,
        metavar="PCT",
        help="exit 1 when B is worse than A by more than PCT: step times and memory by PCT "
        "percent, the input-wait share by PCT points, a throughput by PCT percent with the "
        "runs' ranges apart, or a non-zero exit where A's was 0",
    )
    d.add_argument("--json", action="store_true", help="print the diff as JSON")
    d.add_argument("--all", action="store_true", help="also list the rows that are the same")


def _percent(text: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return v


def load(text: str) -> tuple[Kind, dict[str, Any], str]:
    """A session (path, name, ``last``) or a JSON result: its kind, its summary, its label."""
    path = Path(text).expanduser()
    if path.suffix == ".json":
        if not path.is_file():
            raise UserError(f"no such file: {path}")
        kind, data = read_json(path)
        return kind, data, str(path)
    from sofa_top.cli.saved import check_intact, resolve_session
    from sofa_top.recording.report import session_summary

    session = resolve_session(text)
    check_intact(session)
    return "session", session_summary(session), str(session)


def diff_main(args: argparse.Namespace) -> int:
    """Run ``sofa-top diff``."""
    ka, a, la = load(args.a)
    kb, b, lb = load(args.b)
    if ka != kb:
        raise UserError(f"cannot diff a {ka} ({la}) against a {kb} ({lb})")
    result = diff(ka, a, b, (la, lb), args.threshold)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(result, show_same=args.all)
    return EXIT_REGRESSED if result.regressions else 0


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _change(r: Row) -> Text:
    if r.change is None:
        return Text("" if r.a == r.b else "changed", style="" if r.a == r.b else "yellow")
    text = f"{r.change * 100:+.1f} pt" if r.better == "fraction" else f"{r.change * 100:+.1f}%"
    style = "bold red" if r.regressed else ""
    return Text(text, style=style)


def render(result: Diff, *, show_same: bool) -> None:
    """The diff for people: one table, regressions in red, then the verdict on B."""
    con = Console()
    title = Text(f"A: {result.a}\nB: {result.b}")  # Text: a path's '[...]' is not markup
    table = Table("section", "figure", "A", "B", "change", title=title)
    for r in result.rows:
        if not show_same and r.a == r.b and not r.regressed:
            continue
        name = Text(r.name) + (Text(f" ({r.note})", style="dim") if r.note else Text())
        table.add_row(r.section, name, _cell(r.a), _cell(r.b), _change(r))
    con.print(table)
    if result.threshold_percent is None:
        return
    if result.regressions:
        items = "; ".join(f"{r.section}: {r.name}" for r in result.regressions)
        con.print(f"[bold red]B regressed past {result.threshold_percent:g}%[/]: {items}")
    else:
        con.print(f"no regression past {result.threshold_percent:g}%")
