"""The end-of-session summary (``record --json``), read back from the store.

The JSON schema is ``record.schema.json`` beside this file (tests validate against it); in short
(``schema: 1``)::

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sofa_top.analysis.stackstats import summarize
from sofa_top.analysis.verdicts import Evidence, judge, others_cores
from sofa_top.model.samples import PipelineSample, StackWindow, StepSample
from sofa_top.model.snapshot import StackSummary
from sofa_top.model.workload import ModelReport, merge, model_report
from sofa_top.recording.store import SessionReader

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("record.schema.json")
TOP_N = 10


def _stats(values: list[float | None]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    return statistics.fmean(vals), max(vals)


@dataclass
class _Read:
    """What the summary reads from a session file."""

    meta: dict[str, Any]
    points: dict[str, list[float | None]]  # series name -> values (proc.* left out)
    target_cpu: list[float | None]  # the target process's own CPU
    windows: list[StackWindow]
    steps: list[StepSample]
    pipeline: PipelineSample | None
    agent_dropped: int
    model: ModelReport | None = None


def _read(path: Path) -> _Read:
    reader = SessionReader(path)
    try:
        meta = reader.meta()
        target_pid = (meta.get("target") or {}).get("pid")
        return _Read(
            meta=meta,
            points={
                name: [v for _, v, _ in reader.points(name)]
                for name in reader.series_names()
                if not name.startswith("proc.")
            },
            target_cpu=[v for _, v, _ in reader.points(f"proc.{target_pid}.cpu")],
            windows=list(reader.stack_windows()),
            steps=reader.steps(),
            pipeline=reader.last_pipeline(),
            agent_dropped=_agent_dropped(reader),
            model=_model(reader),
        )
    finally:
        reader.close()


def _others(r: _Read, tree_mean: float | None) -> float | None:
    """Cores other processes kept busy over the session, on the tree's cores."""
    machine = int(r.meta.get("machine_cpu_count") or r.meta.get("cpu_count") or 1)
    sys_mean = _stats(r.points.get("sys.cpu", []))[0]
    busy = None if sys_mean is None else sys_mean / 100.0 * machine
    return others_cores(busy, tree_mean, int(r.meta.get("cpu_count") or 1), machine)


def _model(reader: SessionReader) -> ModelReport | None:
    out: ModelReport | None = None
    for e in reader.events("agent-model"):
        report = model_report(e.data)
        if report is not None:
            out = merge(out, report)
    return out


def _gpu_json(pts: dict[str, list[float | None]]) -> dict[str, Any] | None:
    gpus = sorted({int(n.split(".")[1]) for n in pts if n.startswith("gpu.")})
    if not gpus:
        return None
    devices = []
    for i in gpus:
        util, _ = _stats(pts.get(f"gpu.{i}.util", []))
        _, mem = _stats(pts.get(f"gpu.{i}.mem_used", []))
        power, _ = _stats(pts.get(f"gpu.{i}.power", []))
        devices.append(
            {"index": i, "util_mean_percent": util, "mem_max_bytes": mem, "power_mean_w": power}
        )
    return {"devices": devices}


def _stacks_json(windows: list[StackWindow], summary: StackSummary | None) -> dict[str, Any]:
    errors = [w for w in windows if w.error]
    # The stack collector's closing "target exited" window does not say why there were no
    # stacks (not Python, ptrace denied, ...): an earlier error does.
    last_err = next((w for w in reversed(errors) if w.error != "target exited"), None) or (
        errors[-1] if errors else None
    )
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
        for f in (summary.functions[:TOP_N] if summary else ())
    ]
    return {
        "thread_samples": summary.thread_samples if summary else 0,
        "rate_hz": summary.rate_hz if summary else None,
        "split": dict(summary.split) if summary else {},
        "error": last_err.error if last_err and summary is None else None,
        "hint": last_err.hint if last_err and summary is None else None,
        "top": top,
    }


def _steps_json(steps: list[StepSample], dropped: int) -> dict[str, Any]:
    durations = [s.duration_s for s in steps]
    waits = sum(s.input_wait_s for s in steps)
    return {
        "count": len(steps),
        "median_step_s": statistics.median(durations) if durations else None,
        "input_wait_fraction": waits / sum(durations) if durations and sum(durations) else None,
        "dropped": dropped,
    }


def session_summary(path: str | Path) -> dict[str, Any]:
    """Summarize a finished (or still running) session file: ``record --json``."""
    r = _read(Path(path))
    meta, pts = r.meta, r.points
    started, ended = meta.get("started"), meta.get("ended")
    tree_mean, tree_max = _stats(pts.get("tree.cpu", []))
    target_mean, _ = _stats(r.target_cpu)
    summary = summarize(r.windows) if r.windows else None
    verdict = judge(
        Evidence(
            steps=r.steps,
            stacks=summary,
            tree_cpu=tree_mean,
            cpu_count=int(meta.get("cpu_count") or 1),
            pipeline=r.pipeline,
            child_cpu=None if tree_mean is None else max(0.0, tree_mean - (target_mean or 0.0)),
            runnable_threads=_stats(pts.get("tree.runnable", []))[0],
            others_cores=_others(r, tree_mean),
            model=r.model,
        )
    )
    return {
        "schema": SCHEMA_VERSION,
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
        "steps": _steps_json(r.steps, r.agent_dropped),
        "cpu": {
            "cores": meta.get("cpu_count"),
            "tree_mean_percent": tree_mean,
            "tree_max_percent": tree_max,
            "system_mean_percent": _stats(pts.get("sys.cpu", []))[0],
            "rss_max_bytes": _stats(pts.get("tree.rss", []))[1],
            "threads_max": _stats(pts.get("tree.threads", []))[1],
        },
        "gpu": _gpu_json(pts),
        "stacks": _stacks_json(r.windows, summary),
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
