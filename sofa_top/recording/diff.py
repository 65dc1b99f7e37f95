"""``sofa-top diff A B``: two sessions, or two ``compare`` results, side by side.

A session is read as its ``record --json`` summary (``report.session_summary``, or a file that
command wrote), so every figure is the one ``record`` reports: per step phase (``steps.phases``;
a summary without phases is one phase, the main one), the verdict field by field, CPU and
memory, the exit code. A compare result is read per configuration (median throughput and its
range over the repeats).

Gating (``threshold``, a percentage): B regresses against A where a lower-is-better time or size
grew by more than ``threshold`` percent, a fraction of the step (input wait) grew by more than
``threshold`` percentage points, a throughput fell by more than ``threshold`` percent with the
two runs' ranges apart (overlapping ranges are noise, not a regression), or the workload exited
non-zero where A's did not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sofa_top.datamodel.errors import UserError

Kind = Literal["session", "compare"]
# How a row is judged: lower or higher is better, a fraction (points), or shown only.
Better = Literal["lower", "higher", "fraction", "exit", "none"]


@dataclass(frozen=True)
class Row:
    """One figure of A and B."""

    section: str  # "phase train", "verdict", "evidence", "cpu", "run", "config prefetch", ...
    name: str
    a: float | int | str | None
    b: float | int | str | None
    better: Better = "none"
    change: float | None = None  # relative (B/A - 1) or, for fractions, points (B - A)
    regressed: bool = False
    note: str = ""


@dataclass(frozen=True)
class Diff:
    """The side-by-side of A and B, and what regressed past the threshold."""

    kind: Kind
    a: str
    b: str
    threshold_percent: float | None
    rows: list[Row] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        """The rows past the threshold."""
        return [r for r in self.rows if r.regressed]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` form."""
        return {
            "schema": 1,
            "kind": self.kind,
            "a": self.a,
            "b": self.b,
            "threshold_percent": self.threshold_percent,
            "regressed": bool(self.regressions),
            "regressions": [f"{r.section}: {r.name}" for r in self.regressions],
            "rows": [asdict(r) for r in self.rows],
        }


def read_json(path: Path) -> tuple[Kind, dict[str, Any]]:
    """A ``record --json`` or ``compare --json`` file (UserError for anything else)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"{path} is not JSON: {exc}") from None
    if isinstance(data, dict) and "runs" in data and "best" in data:
        return "compare", data
    if isinstance(data, dict) and "steps" in data and "verdict" in data:
        return "session", data
    raise UserError(f"{path} is neither a 'record --json' summary nor a 'compare --json' result")


def diff(
    kind: Kind,
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    labels: tuple[str, str],
    threshold_percent: float | None,
) -> Diff:
    """Compare two summaries (or two compare results) of the same ``kind``."""
    rows = _session_rows(a, b) if kind == "session" else _compare_rows(a, b)
    judged = [_judge(r, threshold_percent) for r in rows]
    return Diff(kind, labels[0], labels[1], threshold_percent, judged)


# -- sessions ------------------------------------------------------------------------------------

PHASE_FIGURES: tuple[tuple[str, Better], ...] = (
    ("count", "none"),
    ("median_step_s", "lower"),
    ("p90_s", "lower"),
    ("p99_s", "none"),  # a handful of steps on a short run: shown, not gated
    ("input_wait_fraction", "fraction"),
)


CPU_FIGURES: tuple[tuple[str, Better], ...] = (
    ("tree_mean_percent", "none"),
    ("rss_max_bytes", "lower"),
    ("threads_max", "none"),
)


def _phases(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    steps = summary.get("steps") or {}
    phases = steps.get("phases")
    if isinstance(phases, list) and phases:
        return {str(p.get("phase")): p for p in phases if isinstance(p, dict)}
    return {str(steps.get("phase") or "all"): steps} if steps.get("count") else {}


def _session_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Row]:
    rows: list[Row] = []
    pa, pb = _phases(a), _phases(b)
    for phase in _union(pa, pb):
        for name, better in PHASE_FIGURES:
            rows.append(
                Row(f"phase {phase}", name, _get(pa.get(phase), name), _get(pb.get(phase), name),
                    better)
            )  # fmt: skip
    va, vb = a.get("verdict") or {}, b.get("verdict") or {}
    for name in ("kind", "severity", "confidence", "headline"):
        rows.append(Row("verdict", name, _verdict_field(va, name), _verdict_field(vb, name)))
    ea, eb = va.get("evidence") or {}, vb.get("evidence") or {}
    for name in _union(ea, eb):
        x, y = ea.get(name), eb.get(name)
        if isinstance(x, dict | list) or isinstance(y, dict | list):
            x, y = _compact(x), _compact(y)
        rows.append(Row("evidence", name, x, y))
    ra, rb = va.get("recommendations") or [], vb.get("recommendations") or []
    rows.append(Row("verdict", "first fix", _first(ra), _first(rb)))
    ca, cb = a.get("cpu") or {}, b.get("cpu") or {}
    for name, better in CPU_FIGURES:
        rows.append(Row("cpu", name, _get(ca, name), _get(cb, name), better))
    sa, sb = (a.get("stacks") or {}).get("split") or {}, (b.get("stacks") or {}).get("split") or {}
    for name in _union(sa, sb):
        rows.append(Row("stacks split", name, sa.get(name), sb.get(name)))
    rows += [
        Row("run", "duration_s", a.get("duration_s"), b.get("duration_s")),
        Row("run", "exit_code", _text(a.get("exit_code")), _text(b.get("exit_code"))),
        Row("run", "workload failed", _failed(a), _failed(b), "exit"),
        Row("run", "workload_error", a.get("workload_error"), b.get("workload_error")),
    ]
    return rows


# -- compare results ------------------------------------------------------------------------------


def _compare_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Row]:
    ra = {str(r.get("config")): r for r in a.get("runs") or [] if isinstance(r, dict)}
    rb = {str(r.get("config")): r for r in b.get("runs") or [] if isinstance(r, dict)}
    rows: list[Row] = []
    for config in _union(ra, rb):
        x, y = ra.get(config) or {}, rb.get(config) or {}
        tx, ty = x.get("throughput") or {}, y.get("throughput") or {}
        unit = tx.get("unit") or ty.get("unit") or ""
        apart = _apart(tx, ty)
        note = "" if apart or not (tx and ty) else "ranges overlap: within the runs' noise"
        rows.append(
            Row(f"config {config}", f"throughput median ({unit})", tx.get("median"),
                ty.get("median"), "higher" if apart else "none", note=note)
        )  # fmt: skip
        rows.append(
            Row(f"config {config}", "throughput range", _range(tx), _range(ty)),
        )
        rows.append(Row(f"config {config}", "speedup", x.get("speedup"), y.get("speedup")))
        rows.append(Row(f"config {config}", "verdict", x.get("verdict"), y.get("verdict")))
        rows.append(
            Row(f"config {config}", "flags", _compact(x.get("flags")), _compact(y.get("flags")))
        )
    rows.append(Row("compare", "best", _compact(a.get("best")), _compact(b.get("best"))))
    return rows


def _apart(x: Mapping[str, Any], y: Mapping[str, Any]) -> bool:
    """The two throughput ranges do not overlap."""
    lo_x, hi_x, lo_y, hi_y = (_num(x.get("min")), _num(x.get("max")), _num(y.get("min")),
                              _num(y.get("max")))  # fmt: skip
    if None in (lo_x, hi_x, lo_y, hi_y):
        return False
    assert lo_x is not None and hi_x is not None and lo_y is not None and hi_y is not None
    return hi_y < lo_x or hi_x < lo_y


def _range(t: Mapping[str, Any]) -> str | None:
    lo, hi = _num(t.get("min")), _num(t.get("max"))
    return None if lo is None or hi is None else f"{lo:.4g}-{hi:.4g}"


# -- judging --------------------------------------------------------------------------------------


def _judge(row: Row, threshold: float | None) -> Row:
    a, b = _num(row.a), _num(row.b)
    change: float | None = None
    if a is not None and b is not None:
        if row.better == "fraction":
            change = b - a
        elif a != 0:
            change = b / a - 1
    regressed = False
    if threshold is not None:
        limit = threshold / 100
        if row.better == "lower" and change is not None:
            regressed = change > limit
        elif row.better == "higher" and change is not None:
            regressed = change < -limit
        elif row.better == "fraction" and change is not None:
            regressed = change > limit
        elif row.better == "exit":
            regressed = row.a is False and row.b is True
    return Row(row.section, row.name, row.a, row.b, row.better, change, regressed, row.note)


def _failed(summary: Mapping[str, Any]) -> bool:
    """The workload failed by itself (not stopped by sofa-top at the end of a recording)."""
    if summary.get("workload_error"):
        return True
    code = summary.get("exit_code")
    return summary.get("end_reason") == "target exited" and code not in (0, None)


def _text(v: object) -> str | None:
    return None if v is None else str(v)


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _get(d: Mapping[str, Any] | None, key: str) -> Any:
    return None if d is None else d.get(key)


def _verdict_field(v: Mapping[str, Any], key: str) -> Any:
    """A verdict's field; an older version's "" for no severity reads as null, as now."""
    value = v.get(key)
    return None if key == "severity" and value == "" else value


def _first(recs: list[Any]) -> str | None:
    return str(recs[0]) if recs else None


def _compact(v: object) -> str | None:
    return None if v is None else json.dumps(v, separators=(",", ":"), sort_keys=True)


def _union(a: Iterable[str], b: Iterable[str]) -> list[str]:
    seen = dict.fromkeys(a)
    seen.update(dict.fromkeys(b))
    return list(seen)
