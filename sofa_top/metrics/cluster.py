"""``sofa-top cluster``: the ranks of every sofa-top a Prometheus server scrapes, read back with
PromQL over its HTTP API, and the straggler verdict across all of them.

Each figure is the latest value of its series within ``lookback_s`` (``last_over_time``), so
the view works while the job runs and shortly after it ended (a series that stopped being
scraped is stale for an instant query, but ``last_over_time`` still sees its last sample).
Ranks are grouped by ``run`` (the sofa-top session name); ``--run`` narrows the view to one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sofa_top.analysis.ranks import cross_rank_verdict, straggler_json
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.verdict import SEVERITIES, Verdict, verdict_kind
from sofa_top.datamodel.verdict_evidence import BareEvidence
from sofa_top.metrics import names as n

DEFAULT_LOOKBACK_S = 120.0
TIMEOUT_S = 5.0
SCHEMA_VERSION = 1
_NUMERIC = (
    n.STEP_SECONDS,
    n.INPUT_WAIT,
    n.COLLECTIVE_WAIT,
    n.WINDOW_STEPS,
    n.RANK_PID,
    n.RANK_UP,
    n.WORLD_SIZE,
)
Key = tuple[str, str, str, str]  # run, node, rank, local_rank


@dataclass(frozen=True)
class ClusterRun:
    """One run's ranks (every node that reported it) and its cross-rank verdict."""

    run: str
    ranks: tuple[RankStat, ...]
    verdict: Verdict | None = None


@dataclass
class _Rank:
    values: dict[str, float] = field(default_factory=dict)
    verdict: tuple[str, str, str] | None = None  # kind, cause, severity


def _selector(run: str | None) -> str:
    if run is None:
        return ""
    return '{run="' + run.replace("\\", "\\\\").replace('"', '\\"') + '"}'


class Prometheus:
    """A Prometheus server's query API (``/api/v1/query``)."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UserError(
                f"--prometheus needs an http(s) URL, like http://127.0.0.1:9090: {url!r}"
            )
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (raises UserError, one line, on any failure)."""
        q = urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v1/query?{q}", timeout=self.timeout_s
            ) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise UserError(
                f"Prometheus at {self.url} refused the query: {_api_error(exc)}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            why = getattr(reason, "strerror", None) or str(reason) or type(exc).__name__
            raise UserError(f"cannot reach Prometheus at {self.url}: {why}") from None
        try:
            doc = json.loads(body)
            if doc.get("status") != "success":
                raise ValueError(doc.get("error") or "status is not success")
            result = doc["data"]["result"]
            if not isinstance(result, list):
                raise ValueError("the result is not a vector")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{self.url} is not a Prometheus query API: {exc}") from None
        return result


def _api_error(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error") or exc.reason)
    except (ValueError, OSError, AttributeError):
        return f"HTTP {exc.code} {exc.reason}"


def _key(metric: Mapping[str, str]) -> Key:
    return (
        metric.get(n.RUN, ""),
        metric.get(n.NODE, ""),
        metric.get(n.RANK, ""),
        metric.get(n.LOCAL_RANK, ""),
    )


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _stat(key: Key, r: _Rank) -> RankStat:
    run, node, rank, local = key
    v = r.values
    verdict = None
    if r.verdict is not None:
        kind, cause, severity = r.verdict
        what = f"{kind} ({cause})" if cause and cause != kind else kind
        verdict = Verdict(
            verdict_kind(kind),
            0.5,
            what,
            BareEvidence(cause if cause and cause != kind else None),
            severity=one_of(severity, SEVERITIES),
        )
    world = v.get(n.WORLD_SIZE)
    return RankStat(
        rank=_int(rank) or 0,
        pid=int(v.get(n.RANK_PID, 0)),
        node=node,
        local_rank=_int(local),
        world_size=int(world) if world is not None else None,
        steps=int(v.get(n.WINDOW_STEPS, 0)),
        step_s=v.get(n.STEP_SECONDS),
        input_wait_fraction=v.get(n.INPUT_WAIT),
        collective_wait_fraction=v.get(n.COLLECTIVE_WAIT),
        verdict=verdict,
        alive=v.get(n.RANK_UP, 1.0) > 0,
        run=run,
    )


def read_cluster(
    prom: Prometheus, run: str | None = None, lookback_s: float = DEFAULT_LOOKBACK_S
) -> list[ClusterRun]:
    """Every run's ranks and verdict (raises UserError when nothing matches)."""
    window = f"[{max(1, round(lookback_s))}s]"
    sel = _selector(run)
    ranks: dict[Key, _Rank] = {}
    for name in _NUMERIC:
        for item in prom.query(f"last_over_time({name}{sel}{window})"):
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            ranks.setdefault(_key(item["metric"]), _Rank()).values[name] = value
    for item in prom.query(f"last_over_time({n.VERDICT_INFO}{sel}{window}) == 1"):
        m = item.get("metric", {})
        entry = ranks.get(_key(m))
        if entry is not None:
            entry.verdict = (m.get("kind", ""), m.get("cause", ""), m.get("severity", ""))
    if not ranks:
        raise UserError(_nothing(prom, run, window))
    by_run: dict[str, list[RankStat]] = {}
    for key, entry in ranks.items():
        by_run.setdefault(key[0], []).append(_stat(key, entry))
    out: list[ClusterRun] = []
    for name in sorted(by_run):
        stats = tuple(sorted(by_run[name], key=lambda s: (s.rank, s.node, s.pid)))
        out.append(ClusterRun(name, stats, cross_rank_verdict(stats)))
    return out


def _nothing(prom: Prometheus, run: str | None, window: str) -> str:
    where = f"Prometheus at {prom.url} in the last {window[1:-1]}"
    seen = sorted(
        {
            str(item.get("metric", {}).get(n.RUN, ""))
            for item in prom.query(f"last_over_time({n.INFO}{window})")
        }
        - {""}
    )
    if run is None:
        if seen:
            return f"no steps yet from the sofa-top runs in {where} ({', '.join(seen)})"
        return f"no sofa-top metrics in {where} (is it scraping sofa-top --metrics-port?)"
    others = f"; runs seen: {', '.join(seen)}" if seen else "; no sofa-top run at all"
    return f"no sofa-top metrics for run {run!r} in {where}{others}"


def cluster_json(runs: list[ClusterRun], url: str, lookback_s: float) -> dict[str, Any]:
    """``cluster --json`` (schema ``cluster.schema.json``): every run, plus all ranks and the
    worst straggler at the top level (the one that costs its job the most)."""
    items: list[dict[str, Any]] = []
    stragglers: list[dict[str, object]] = []
    for r in runs:
        straggler = straggler_json(r.verdict)
        if straggler is not None:
            straggler["run"] = r.run
            stragglers.append(straggler)
        items.append(
            {
                "run": r.run,
                "ranks": [s.as_json() for s in r.ranks],
                "straggler": straggler,
                "verdict": None if r.verdict is None else r.verdict.as_json(),
            }
        )
    worst = max(stragglers, key=_speedup, default=None)
    return {
        "schema": SCHEMA_VERSION,
        "prometheus": url,
        "lookback_s": lookback_s,
        "runs": items,
        "ranks": [s.as_json() for r in runs for s in r.ranks],
        "straggler": worst,
    }


def _speedup(straggler: Mapping[str, object]) -> float:
    value = straggler.get("speedup_if_matched")
    return float(value) if isinstance(value, int | float) else 0.0
