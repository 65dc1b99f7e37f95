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
     "steps": {"count", "median_step_s", "input_wait_fraction" (null: the clock cannot see
               input), "p50_s", "p90_s", "p99_s", "phase": the phase these numbers are of,
               "phases": [{"phase": "train"|"eval"|"inference", "count", "input_wait_fraction",
                           "median_step_s", "p50_s", "p90_s", "p99_s"}],
               "compute_split": {"forward", "backward", "optimizer", "collective"} | null,
               "host_split": {"input", "python", "sync", "output", "compute"} of the loop's host
               time | null,
               "dropped": steps the agent counted but could not send (its queue was full),
               "sources": {clock: steps} (all phases), "reason": why there are none | null,
               "note": how the main clock's steps are measured | null},
     "cpu": {"cores", "tree_mean_percent", "tree_max_percent", "system_mean_percent",
             "rss_max_bytes", "threads_max"},
     "gpu": {"devices": [{"index", "util_mean_percent", "mem_max_bytes", "power_mean_w",
                          ... NVML's other readings, "errors": {reading: why}}]} | null,
     "cuda": {"device_name", "bf16_supported", "busy_fraction", "windows", "last_window",
              "mem_reserved_max_bytes", "alloc_retries", "ooms", "errors", ...} | null,
     "stacks": {"thread_samples", "rate_hz", "split": {class: fraction} of the loop's threads,
                "idle_threads", "idle_thread_samples": helpers idle nearly always (kept apart),
                "error": STR|null,
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
from sofa_top.analysis.sources import ABSOLUTE_ONLY, Lines, session_lines
from sofa_top.analysis.stackstats import summarize
from sofa_top.analysis.steps import RunFacts
from sofa_top.analysis.verdicts import Evidence, judge
from sofa_top.collectors.cores import recorded_cores
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    Event,
    PipelineSample,
    StackWindow,
    StepSample,
    TreeSched,
)
from sofa_top.datamodel.snapshot import MODES, StackSummary
from sofa_top.datamodel.verdict import Measured, Verdict
from sofa_top.datamodel.workload import ModelReport
from sofa_top.recording.ranks_live import session_ranks
from sofa_top.recording.readable import reading
from sofa_top.recording.reader import SessionReader, launched
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
    points: dict[str, list[float | None]]  # series name -> values (those the summary reads)
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
    final_verdict: Verdict | None = None  # the one the hub judged at the session's end
    model: ModelReport | None = None
    injected: bool = False  # attach mode: the agent was injected into the running target
    sched: tuple[TreeSched, ...] = ()  # the scheduler's accounting of the tree's threads
    runnable: tuple[float, ...] = ()  # its runnable threads, counted while the loop ran
    neighbours: Neighbours | None = None  # the last scan of the other processes
    measured: tuple[Measured, ...] = ()  # what comparisons of this workload measured
    sources: Lines = ABSOLUTE_ONLY  # the source lines the session read (``analysis.sources``)


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


def _timed(name: str) -> bool:
    """The series read with their times (the scheduler's readings and the runnable count are
    taken from the loop's first step on); the others are read as values only."""
    return name.startswith("sched.") or name == "tree.runnable"


def _for_verdict(name: str) -> bool:
    """The series the verdict reads (``_judge_read``), besides the target's own CPU."""
    return name == "tree.cpu" or _timed(name)


def _for_summary(name: str) -> bool:
    """The series the summary reads (a long session has millions of points of the others)."""
    return _for_verdict(name) or name in _SUMMARY_SERIES or name.startswith("gpu.")


_SUMMARY_SERIES = frozenset(("sys.cpu", "tree.rss", "tree.threads"))


def _read(path: Path, verdict_only: bool = False) -> _Read:
    """What the summary reads; ``verdict_only``: only the series the verdict reads (the final
    verdict of a long session reads a fraction of its millions of points)."""
    reader = SessionReader(path)
    try:
        meta = reader.meta()
        target_pid = (meta.get("target") or {}).get("pid")
        agent = reader.agent_info(target_pid)
        steps = step_facts.valid_steps(reader.steps(), agent)
        names = [
            n for n in reader.series_names() if (_for_verdict if verdict_only else _for_summary)(n)
        ]
        raw = {n: reader.points(n) for n in names if _timed(n)}
        neighbours = [n for e in reader.events("neighbours") if (n := neighbours_of(e.data))]
        # what the threads did while the loop ran (not the interpreter's start and imports)
        loop = min((s.start for s in steps), default=None)
        return _Read(
            meta=meta,
            points={n: [v for _, v, _ in raw[n]] if n in raw else reader.values(n) for n in names},
            errors={n: reader.errors(n) for n in names if n.startswith("gpu.")},
            target_cpu=reader.values(f"proc.{target_pid}.cpu"),
            windows=list(reader.stack_windows()),
            steps=steps,
            pipeline=reader.last_pipeline(),
            agent_dropped=_agent_dropped(reader),
            ranks=_ranks(reader, steps, recorded_cores(meta)),
            cuda=reader.cuda_samples(),
            cuda_errors=[e.message for e in reader.events("cuda-error")],
            agent=agent,
            stderr_tail=_stderr_tail(reader),
            final_verdict=final_verdict(reader.events("verdict")),
            model=reader.model_report(),
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
            sources=session_lines(meta),
        )
    finally:
        reader.close()


def _typical(scans: list[Neighbours]) -> Neighbours | None:
    """The other processes' load over the session: the scan at their median load."""
    if not scans:
        return None
    return sorted(scans, key=lambda n: n.others_cores)[len(scans) // 2]


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
        "idle_threads": summary.idle_threads if summary else 0,
        "idle_thread_samples": summary.idle_thread_samples if summary else 0,
    }


def _phase_json(
    steps: list[StepSample], summary: StackSummary | None
) -> dict[str, float | int | None]:
    """Count, input wait, median and percentiles of one phase's steps."""
    durations = [s.duration_s for s in steps]
    host, n = (summary.host_split, summary.host_samples) if summary else (None, 0)
    return {
        "count": len(steps),
        "input_wait_fraction": step_facts.input_fraction(steps, host, n),
        "median_step_s": statistics.median(durations) if durations else None,
        "p50_s": step_facts.percentile(durations, 0.5),
        "p90_s": step_facts.percentile(durations, 0.9),
        "p99_s": step_facts.percentile(durations, 0.99),
    }


def _steps_json(
    all_steps: list[StepSample], dropped: int, facts: RunFacts, summary: StackSummary | None
) -> dict[str, Any]:
    phases = step_facts.by_phase(all_steps)
    phase = step_facts.main_phase(phases)
    steps = phases[phase] if phase is not None else []
    main_json = _phase_json(steps, summary)
    busy = [s for s in steps if s.gpu_busy_s is not None]
    spans = [s.gpu_span_s for s in steps if s.gpu_span_s is not None]
    busy_time = sum(s.duration_s for s in busy)
    main = step_facts.main_label(steps)
    notes = dict(facts.agent.step_notes) if facts.agent is not None else {}
    host = (
        summary.host_split
        if summary is not None and step_facts.model_call(step_facts.main_source(steps))
        else None
    )
    return {
        **main_json,
        "phase": phase,
        "phases": [
            {"phase": p, **_phase_json(phases[p], summary)}
            for p in step_facts.PHASES
            if p in phases
        ],
        "compute_split": step_facts.compute_split(steps),
        "host_split": None if host is None else dict(host),
        "dropped": dropped,
        # GPU loops: busy time over wall time of the steps whose GPU time is known
        "gpu_busy_fraction": min(1.0, sum(s.gpu_busy_s or 0.0 for s in busy) / busy_time)
        if busy_time > 0
        else None,
        "gpu_busy_steps": len(busy),
        "median_gpu_span_s": statistics.median(spans) if spans else None,
        "sources": step_facts.step_sources(all_steps),
        "reason": None if all_steps else step_facts.no_steps_reason(facts),
        "note": notes.get(main) if main is not None else None,
    }


def _facts(r: _Read) -> RunFacts:
    """What the session file knows of the run besides its samples."""
    meta = r.meta
    exit_code = meta.get("exit_code")
    stopped = meta.get("stopped_job")
    facts = RunFacts(
        mode=one_of(meta.get("mode"), MODES),
        launched=launched(meta),
        agent=r.agent,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        workload_error=r.stderr_tail,
        stopped=stopped if isinstance(stopped, bool) else None,
    )
    return facts if step_facts.failed(facts) else replace(facts, workload_error=None)


def _judge_read(r: _Read, facts: RunFacts, summary: StackSummary | None) -> Verdict:
    """The verdict over the whole session; ``summary``: the stacks of all its windows, when
    already summarized (else summarized here, if the steps' windows do not serve)."""
    meta, pts = r.meta, r.points
    tree_mean, _ = _stats(pts.get("tree.cpu", []))
    target_mean, _ = _stats(r.target_cpu)
    stacks = _during_steps(r.windows, r.steps, r.sources)
    if stacks is None:
        stacks = summary or (summarize(r.windows, sources=r.sources) if r.windows else None)
    return judge(
        Evidence(
            steps=r.steps,
            stacks=stacks,
            tree_cpu=tree_mean,
            cpu_count=recorded_cores(meta),
            pipeline=r.pipeline,
            child_cpu=None if tree_mean is None else max(0.0, tree_mean - (target_mean or 0.0)),
            cuda=r.cuda,
            runnable_threads=_stats(list(r.runnable or pts.get("tree.runnable", [])))[0],
            model=r.model,
            facts=facts,
            sched=sched_means(r.sched),
            neighbours=r.neighbours,
            measured=r.measured,
            training=step_facts.trained(r.steps),
        )
    )


def session_verdict(path: str | Path) -> Verdict:
    """The verdict over the whole session (what ``record --json`` says), judged from the file:
    the hub stores it as the session's final verdict when the session ends."""
    with reading(Path(path)):
        r = _read(Path(path), verdict_only=True)
        return _judge_read(r, _facts(r), None)


def session_summary(path: str | Path) -> dict[str, Any]:
    """Summarize a finished (or still running) session file: ``record --json``. Its verdict is
    the session's final one when the hub stored it (replay shows the same at the end). A
    file that does not read is the reader's one ``UserError`` line."""
    with reading(Path(path)):
        return _summary(path)


def _summary(path: str | Path) -> dict[str, Any]:
    r = _read(Path(path))
    meta, pts = r.meta, r.points
    started, ended = meta.get("started"), meta.get("ended")
    tree_mean, tree_max = _stats(pts.get("tree.cpu", []))
    sys_mean, _ = _stats(pts.get("sys.cpu", []))
    summary = summarize(r.windows, sources=r.sources) if r.windows else None
    facts = _facts(r)
    # measurements a comparison appended after the session ended are judged with it
    final = r.final_verdict if not r.measured else None
    verdict = final or _judge_read(r, facts, summary)
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
        "steps": _steps_json(r.steps, r.agent_dropped, facts, summary),
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


def _during_steps(
    windows: list[StackWindow], steps: list[StepSample], sources: Lines
) -> StackSummary | None:
    """The stacks of the windows the steps ran in (the verdict judges the loop, not the
    imports before it); None without steps or such windows."""
    if not steps:
        return None
    first, last = min(s.start for s in steps), max(s.ts for s in steps)
    during = [w for w in windows if w.ts_end >= first and w.ts_start <= last]
    return summarize(during, sources=sources) if during else None


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


def _stderr_tail(reader: SessionReader) -> str | None:
    """The line of the workload's stderr that names its error (a traceback's last line)."""
    logs = reader.events("log")
    return step_facts.error_line(e.message for e in logs if e.data.get("stream") == "stderr")


def final_verdict(verdicts: Sequence[Event]) -> Verdict | None:
    """The session's final verdict among its ``verdict`` events (None: the session did not
    end cleanly, or a version that did not store one wrote it)."""
    final = next((e for e in reversed(verdicts) if e.data.get("final") is True), None)
    return None if final is None else Verdict.from_json(final.data, final.message)
