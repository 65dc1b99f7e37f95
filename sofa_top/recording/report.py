"""The end-of-session summary (``record --json``), read back from the store.

The JSON schema is ``record.schema.json`` beside this file (tests validate against it); in short
(``schema: 1``)::

    {"schema": 1, "session": PATH, "mode": "attach"|"record"|..., "injected": BOOL,
     "target": {"pid", "name", "cmdline"}, "started": UNIX, "ended": UNIX|null,
     "duration_s": S, "exit_code": INT|null, "end_reason": STR,
     "dropped_samples": samples sofa-top itself dropped because its writer fell behind,
     "verdict": {"kind", "confidence", "evidence", "recommendations"} | null (a distributed job
                 with a straggler: the straggler's, its job-level average in evidence.job_verdict),
     "workload_error": the last line the workload wrote to stderr when it failed | null,
     "steps": {"count", "median_step_s", "input_wait_fraction",
               "dropped": steps the agent counted but could not send (its queue was full),
               "sources": {clock: steps}, "reason": why there are none | null,
               "note": how the main clock's steps are measured | null},
     "cpu": {"cores", "tree_mean_percent", "tree_max_percent", "system_mean_percent",
             "rss_max_bytes", "threads_max"},
     "gpu": {"devices": [{"index", "util_mean_percent", "mem_max_bytes", "power_mean_w",
                          ... NVML's other readings, "errors": {reading: why}}]} | null,
     "cuda": {"device_name", "bf16_supported", "busy_fraction", "windows", "last_window",
              "mem_reserved_max_bytes", "alloc_retries", "ooms", "errors", ...} | null,
     "stacks": {"thread_samples", "rate_hz", "split": {class: fraction}, "error": STR|null,
                "hint": STR|null, "top": [{"function", "file", "line", "own_pct", "total_pct",
                                           "thread", "class"}],
                "agent_samples": active samples of sofa-top's own agent (left out of the rest),
                "agent_fraction": their share of all samples},
     "ranks": [{"rank", "local_rank", "node", "pid", "step_s", "input_wait_fraction",
                "collective_wait_fraction", "verdict", ...}] (empty: not a distributed job),
     "straggler": {"rank", "cause", "verdict", "others_collective_wait_fraction", ...} | null,
     "rank_verdict": the cross-rank verdict ("straggler" / "balanced") | null}
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.causes import Neighbours, neighbours_of, readings_of, sched_means
from sofa_top.analysis.ranks import (
    cross_rank_verdict,
    headline_verdict,
    rank_stats,
    straggler_json,
)
from sofa_top.analysis.stackstats import summarize
from sofa_top.analysis.steps import RunFacts
from sofa_top.analysis.verdicts import Evidence, judge
from sofa_top.model.ranks import RankStat
from sofa_top.model.samples import (
    AgentInfo,
    CudaSample,
    PipelineSample,
    StackWindow,
    StepSample,
    TreeSched,
)
from sofa_top.model.snapshot import StackSummary
from sofa_top.model.verdict import Measured
from sofa_top.model.workload import ModelReport, merge, model_report
from sofa_top.recording.ranks_live import session_ranks
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report_gpu import cuda_json, gpu_json

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
    ranks: tuple[RankStat, ...]
    cuda: list[CudaSample]
    cuda_errors: list[str]
    errors: dict[str, list[str]]  # series name -> the reasons its readings failed
    agent: AgentInfo | None  # the target's agent's last report
    stderr_tail: str | None  # the workload's last non-empty stderr line
    model: ModelReport | None = None
    injected: bool = False  # attach mode: the agent was injected into the running target
    sched: tuple[TreeSched, ...] = ()  # the scheduler's accounting of the tree's threads
    runnable: tuple[float, ...] = ()  # its runnable threads, counted while the loop ran
    neighbours: Neighbours | None = None  # the last scan of the other processes
    measured: tuple[Measured, ...] = ()  # what comparisons of this workload measured


def _ranks(reader: SessionReader, steps: list[StepSample], cpu_count: int) -> tuple[RankStat, ...]:
    """Every rank over the whole session (empty when the session has no ranks)."""
    rank_events = reader.events("rank")
    if not rank_events:
        return ()
    procs = reader.processes()
    cpu: dict[int, float] = {}
    for p in procs:
        mean, _ = _stats([v for _, v, _ in reader.points(f"proc.{p['pid']}.cpu")])
        if mean is not None:
            cpu[int(p["pid"])] = mean
    evidence = session_ranks(
        rank_events,
        reader.events("rank-exit"),
        steps,
        {int(p["pid"]): int(p["ppid"] or 0) for p in procs},
        cpu,
        reader.last_pipelines(),
    )
    return rank_stats(evidence, Evidence(cpu_count=cpu_count))


def _read(path: Path) -> _Read:
    reader = SessionReader(path)
    try:
        meta = reader.meta()
        target_pid = (meta.get("target") or {}).get("pid")
        steps = reader.steps()
        raw = {n: reader.points(n) for n in reader.series_names() if not n.startswith("proc.")}
        neighbours = [n for e in reader.events("neighbours") if (n := neighbours_of(e.data))]
        # what the threads did while the loop ran (not the interpreter's start and imports)
        loop = min((s.start for s in steps), default=None)
        return _Read(
            meta=meta,
            points={name: [v for _, v, _ in pts] for name, pts in raw.items()},
            errors={
                name: [e for _, _, e in pts if e]
                for name, pts in raw.items()
                if name.startswith("gpu.")
            },
            target_cpu=[v for _, v, _ in reader.points(f"proc.{target_pid}.cpu")],
            windows=list(reader.stack_windows()),
            steps=steps,
            pipeline=reader.last_pipeline(),
            agent_dropped=_agent_dropped(reader),
            ranks=_ranks(reader, steps, int(meta.get("cpu_count") or 1)),
            cuda=reader.cuda_samples(),
            cuda_errors=[e.message for e in reader.events("cuda-error")],
            agent=_last_agent(reader, target_pid),
            stderr_tail=_stderr_tail(reader),
            model=_model(reader),
            injected=any(e.data.get("mode") == "attach" for e in reader.events("agent-connected")),
            sched=tuple(
                readings_of({n: [(t, v) for t, v, _ in pts] for n, pts in raw.items()}, loop)
            ),
            runnable=tuple(
                v for t, v, _ in raw.get("tree.runnable", []) if v is not None and t > (loop or 0.0)
            ),
            neighbours=_typical(neighbours),
            measured=tuple(
                m for e in reader.events("measured") if (m := Measured.from_json(e.data))
            ),
        )
    finally:
        reader.close()


def _typical(scans: list[Neighbours]) -> Neighbours | None:
    """The other processes' load over the session: the scan at their median load."""
    if not scans:
        return None
    return sorted(scans, key=lambda n: n.others_cores)[len(scans) // 2]


def _model(reader: SessionReader) -> ModelReport | None:
    out: ModelReport | None = None
    for e in reader.events("agent-model"):
        report = model_report(e.data)
        if report is not None:
            out = merge(out, report)
    return out


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
        "agent_samples": summary.agent_samples if summary else 0,
        "agent_fraction": round(summary.agent_fraction, 4) if summary else 0.0,
    }


def _steps_json(steps: list[StepSample], dropped: int, facts: RunFacts) -> dict[str, Any]:
    durations = [s.duration_s for s in steps]
    waits = sum(s.input_wait_s for s in steps)
    busy = [s for s in steps if s.gpu_busy_s is not None]
    spans = [s.gpu_span_s for s in steps if s.gpu_span_s is not None]
    busy_time = sum(s.duration_s for s in busy)
    main = step_facts.main_source(steps)
    notes = dict(facts.agent.step_notes) if facts.agent is not None else {}
    return {
        "count": len(steps),
        "median_step_s": statistics.median(durations) if durations else None,
        "input_wait_fraction": waits / sum(durations) if durations and sum(durations) else None,
        "dropped": dropped,
        # GPU loops: busy time over wall time of the steps whose GPU time is known
        "gpu_busy_fraction": min(1.0, sum(s.gpu_busy_s or 0.0 for s in busy) / busy_time)
        if busy_time > 0
        else None,
        "gpu_busy_steps": len(busy),
        "median_gpu_span_s": statistics.median(spans) if spans else None,
        "sources": step_facts.step_sources(steps),
        "reason": None if steps else step_facts.no_steps_reason(facts),
        "note": notes.get(main) if main is not None else None,
    }


def session_summary(path: str | Path) -> dict[str, Any]:
    """Summarize a finished (or still running) session file: ``record --json``."""
    r = _read(Path(path))
    meta, pts = r.meta, r.points
    started, ended = meta.get("started"), meta.get("ended")
    tree_mean, tree_max = _stats(pts.get("tree.cpu", []))
    target_mean, _ = _stats(r.target_cpu)
    sys_mean, _ = _stats(pts.get("sys.cpu", []))
    summary = summarize(r.windows) if r.windows else None
    exit_code = meta.get("exit_code")
    facts = RunFacts(
        mode=meta.get("mode"),
        # older files have no "launched": only a launch recorded agent settings
        launched=bool(meta.get("launched", "settings" in meta)),
        agent=r.agent,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        workload_error=r.stderr_tail,
    )
    if not step_facts.failed(facts):
        facts = RunFacts(facts.mode, facts.launched, facts.agent, facts.exit_code, None)
    verdict = judge(
        Evidence(
            steps=r.steps,
            stacks=summary,
            tree_cpu=tree_mean,
            cpu_count=int(meta.get("cpu_count") or 1),
            pipeline=r.pipeline,
            child_cpu=None if tree_mean is None else max(0.0, tree_mean - (target_mean or 0.0)),
            cuda=r.cuda,
            runnable_threads=_stats(list(r.runnable or pts.get("tree.runnable", [])))[0],
            model=r.model,
            facts=facts,
            sched=sched_means(r.sched),
            neighbours=r.neighbours,
            measured=r.measured,
        )
    )
    rank_verdict = cross_rank_verdict(r.ranks)
    verdict = headline_verdict(verdict, rank_verdict) or verdict
    return {
        "schema": SCHEMA_VERSION,
        "session": str(path),
        "mode": meta.get("mode"),
        "injected": r.injected,
        "target": meta.get("target"),
        "started": started,
        "ended": ended,
        "duration_s": round(ended - started, 3) if started and ended else None,
        "exit_code": meta.get("exit_code"),
        "end_reason": meta.get("end_reason"),
        "dropped_samples": int(meta.get("dropped_samples") or 0),
        "workload_error": facts.workload_error,
        "verdict": verdict.as_json(),
        "steps": _steps_json(r.steps, r.agent_dropped, facts),
        "cpu": {
            "cores": meta.get("cpu_count"),
            "tree_mean_percent": tree_mean,
            "tree_max_percent": tree_max,
            "system_mean_percent": sys_mean,
            "rss_max_bytes": _stats(pts.get("tree.rss", []))[1],
            "threads_max": _stats(pts.get("tree.threads", []))[1],
        },
        "gpu": gpu_json(pts, r.errors),
        "cuda": cuda_json(r.cuda, r.cuda_errors),
        "stacks": _stacks_json(r.windows, summary),
        "ranks": [s.as_json() for s in r.ranks],
        "straggler": straggler_json(rank_verdict),
        "rank_verdict": None if rank_verdict is None else rank_verdict.as_json(),
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


def _pairs(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        return ()
    return tuple((str(v[0]), str(v[1])) for v in value if isinstance(v, list) and len(v) == 2)


def _int_of(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _last_agent(reader: SessionReader, pid: object) -> AgentInfo | None:
    """The last report of the target's agent (of any agent when the target's is missing)."""
    last: AgentInfo | None = None
    for e in reader.events("agent"):
        d = e.data
        applied = d.get("hooks_applied")
        info = AgentInfo(
            ts=e.ts,
            pid=_int_of(d.get("pid")),
            python=str(d.get("python") or ""),
            frameworks=_pairs(d.get("frameworks")),
            hooks_applied=tuple(str(h) for h in applied) if isinstance(applied, list) else (),
            hooks_skipped=_pairs(d.get("hooks_skipped")),
            dropped=_int_of(d.get("dropped")),
            step_notes=_pairs(d.get("step_notes")),
        )
        if last is None or info.pid == pid or last.pid != pid:
            last = info
    return last


def _stderr_tail(reader: SessionReader) -> str | None:
    """The last non-empty line the workload wrote to stderr (a traceback's last line)."""
    tail: str | None = None
    for e in reader.events("log"):
        if e.data.get("stream") == "stderr" and e.message.strip():
            tail = e.message.strip()
    return tail
