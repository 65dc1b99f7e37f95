"""The end-of-session summary (``record --json`` and the text twin), read back from the store.

JSON schema (``schema: 1``)::

    {"schema": 1, "session": PATH, "mode": "attach"|"record"|...,
     "target": {"pid", "name", "cmdline"}, "started": UNIX, "ended": UNIX|null,
     "duration_s": S, "exit_code": INT|null, "end_reason": STR,
     "dropped_samples": samples sofa-top itself dropped because its writer fell behind,
     "verdict": {"kind", "confidence", "evidence", "recommendations"} | null,
     "steps": {"count", "median_step_s", "input_wait_fraction",
               "dropped": steps the agent counted but could not send (its queue was full)},
     "cpu": {"cores", "tree_mean_percent", "tree_max_percent", "system_mean_percent",
             "rss_max_bytes", "threads_max"},
     "gpu": {"devices": [{"index", "util_mean_percent", "mem_max_bytes", "power_mean_w"}]} | null,
     "stacks": {"thread_samples", "rate_hz", "split": {class: fraction}, "error": STR|null,
                "hint": STR|null, "top": [{"function", "file", "line", "own_pct", "total_pct",
                                           "thread", "class"}]}}
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sofa_top.analysis.stackstats import summarize
from sofa_top.analysis.verdicts import Evidence, judge, others_cores
from sofa_top.recording.store import SessionReader

TOP_N = 10


def _stats(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), max(vals)


def session_summary(path: str | Path) -> dict[str, Any]:
    """Summarize a finished (or still running) session file."""
    reader = SessionReader(Path(path))
    try:
        meta = reader.meta()
        pts = {
            name: [v for _, v, _ in reader.points(name)]
            for name in reader.series_names()
            if not name.startswith("proc.")
        }
        windows = list(reader.stack_windows())
        steps = reader.steps()
        target_pid = (meta.get("target") or {}).get("pid")
        target_mean, _ = _stats([v for _, v, _ in reader.points(f"proc.{target_pid}.cpu")])
        pipeline = reader.last_pipeline()
        agent_dropped = _agent_dropped(reader)
    finally:
        reader.close()
    started = meta.get("started")
    ended = meta.get("ended")
    tree_mean, tree_max = _stats(pts.get("tree.cpu", []))
    sys_mean, _ = _stats(pts.get("sys.cpu", []))
    _, rss_max = _stats(pts.get("tree.rss", []))
    _, threads_max = _stats(pts.get("tree.threads", []))
    gpus = sorted({int(n.split(".")[1]) for n in pts if n.startswith("gpu.")})
    gpu: dict[str, Any] | None = None
    if gpus:
        gpu = {"devices": []}
        for i in gpus:
            util, _ = _stats(pts.get(f"gpu.{i}.util", []))
            _, mem = _stats(pts.get(f"gpu.{i}.mem_used", []))
            power, _ = _stats(pts.get(f"gpu.{i}.power", []))
            gpu["devices"].append(
                {"index": i, "util_mean_percent": util, "mem_max_bytes": mem, "power_mean_w": power}
            )
    summary = summarize(windows) if windows else None
    errors = [w for w in windows if w.error]
    # The stack collector's closing "target exited" window does not say why there were no
    # stacks (not Python, ptrace denied, ...): an earlier error does.
    last_err = next((w for w in reversed(errors) if w.error != "target exited"), None) or (
        errors[-1] if errors else None
    )
    top = []
    if summary is not None:
        top = [
            {
                "function": f.function,
                "file": f.filename,
                "line": f.line,
                "own_pct": round(f.own_pct, 2),
                "total_pct": round(f.total_pct, 2),
                "thread": f.thread,
                "class": f.klass,
            }
            for f in summary.functions[:TOP_N]
        ]
    verdict = judge(
        Evidence(
            steps=steps,
            stacks=summary,
            tree_cpu=tree_mean,
            cpu_count=int(meta.get("cpu_count") or 1),
            pipeline=pipeline,
            child_cpu=None if tree_mean is None else max(0.0, tree_mean - (target_mean or 0.0)),
            others_cores=others_cores(sys_mean, tree_mean, int(meta.get("cpu_count") or 1)),
        )
    )
    durations = [s.duration_s for s in steps]
    waits = sum(s.input_wait_s for s in steps)
    return {
        "schema": 1,
        "session": str(path),
        "mode": meta.get("mode"),
        "target": meta.get("target"),
        "started": started,
        "ended": ended,
        "duration_s": round(ended - started, 3) if started and ended else None,
        "exit_code": meta.get("exit_code"),
        "end_reason": meta.get("end_reason"),
        "dropped_samples": int(meta.get("dropped_samples") or 0),
        "verdict": verdict.as_json(),
        "steps": {
            "count": len(steps),
            "median_step_s": statistics.median(durations) if durations else None,
            "input_wait_fraction": waits / sum(durations) if durations and sum(durations) else None,
            "dropped": agent_dropped,
        },
        "cpu": {
            "cores": meta.get("cpu_count"),
            "tree_mean_percent": tree_mean,
            "tree_max_percent": tree_max,
            "system_mean_percent": sys_mean,
            "rss_max_bytes": rss_max,
            "threads_max": threads_max,
        },
        "gpu": gpu,
        "stacks": {
            "thread_samples": summary.thread_samples if summary else 0,
            "rate_hz": summary.rate_hz if summary else None,
            "split": dict(summary.split) if summary else {},
            "error": last_err.error if last_err and summary is None else None,
            "hint": last_err.hint if last_err and summary is None else None,
            "top": top,
        },
    }


def _agent_dropped(reader: SessionReader) -> int:
    """Steps the agents counted as dropped: the last count each process reported."""
    per_pid: dict[object, int] = {}
    for kind in ("agent", "agent-exit"):
        for e in reader.events(kind):
            n = e.data.get("dropped")
            if isinstance(n, int):
                pid = e.data.get("pid")
                per_pid[pid] = max(per_pid.get(pid, 0), n)
    return sum(per_pid.values())


def render_summary(s: dict[str, Any]) -> None:
    """Print the summary for people, with rich."""
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = s.get("target") or {}
    con.print(f"[bold]sofa-top[/] session [cyan]{s['session']}[/]")
    v = s["verdict"]
    con.print(f"[bold]{v['headline']}[/] (confidence {v['confidence']:.0%})")
    for rec in v["recommendations"]:
        con.print(f"  -> {rec}")
    con.print(
        f"target PID {t.get('pid')} ({' '.join(t.get('cmdline') or [])[:80]}), "
        f"{s['duration_s']} s, ended: {s['end_reason']}"
    )
    cpu = s["cpu"]
    if cpu["tree_mean_percent"] is not None:
        con.print(
            f"CPU: mean {cpu['tree_mean_percent']:.0f}% max {cpu['tree_max_percent']:.0f}% "
            f"(of {cpu['cores']} cores x 100%), "
            f"RSS max {(cpu['rss_max_bytes'] or 0) / 2**20:.0f} MiB"
        )
    if s.get("dropped_samples"):
        con.print(
            f"[red]{s['dropped_samples']} samples dropped by sofa-top[/] (its writer fell "
            "behind): the session misses them"
        )
    if s["steps"].get("dropped"):
        con.print(
            f"[red]{s['steps']['dropped']} steps dropped by the agent[/] (its queue was full): "
            "the step figures miss them"
        )
    st = s["stacks"]
    if st["error"]:
        con.print(f"[yellow]stacks unavailable:[/] {st['error']}")
        if st["hint"]:
            con.print(f"  fix: {st['hint']}")
    elif st["top"]:
        split = ", ".join(f"{k} {v:.0%}" for k, v in st["split"].items())
        con.print(f"stacks: {st['thread_samples']} thread-samples; {split}")
        table = Table("function", "file:line", "own %", "total %", "thread", "class")
        for f in st["top"]:
            table.add_row(
                f["function"],
                f"{f['file']}:{f['line']}",
                f"{f['own_pct']:.1f}",
                f"{f['total_pct']:.1f}",
                f["thread"],
                f["class"],
            )
        con.print(table)
