"""Read one optimizer run back from its session file: throughput, compile time, verdict,
toggles applied, loss health and the input numbers the headroom model needs."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sofa_top.agent.toggles import OptimizeSpec, Toggle, toggle_of, toggle_of_hook
from sofa_top.analysis.steps import RAISED
from sofa_top.datamodel.evidence_json import parse_evidence
from sofa_top.datamodel.samples import Event, PipelineSample, StepSample
from sofa_top.datamodel.verdict import verdict_kind
from sofa_top.datamodel.verdict_evidence import NO_EVIDENCE, VerdictEvidence
from sofa_top.optimizers.advice import view
from sofa_top.optimizers.measures import (
    DataStream,
    InputStats,
    Points,
    RunOutcome,
    Unit,
    input_stats,
)
from sofa_top.optimizers.probes import affinity
from sofa_top.recording.reader import SessionReader

_LOSS_BAD = re.compile(r"loss\W{0,3}[^\n]{0,40}?\b(nan|-?inf(inity)?)\b", re.IGNORECASE)
_LOSS = re.compile(r"\bloss\s*[=:]?\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)


def logged_loss(lines: Sequence[str]) -> float | None:
    """The loss the workload printed last (``loss=0.12``, ``loss: 0.12``, ``loss 0.12``): the
    median of its last five values, so one noisy batch does not decide a comparison."""
    values = [float(m.group(1)) for line in lines if (m := _LOSS.search(line))]
    return statistics.median(values[-5:]) if values else None


@dataclass
class _Stored:
    """What a run's session file holds that the analysis reads."""

    steps: list[StepSample]
    agent_events: list[Event]
    opt_events: list[Event]
    logs: list[Event]
    meta: dict[str, Any]
    cpu_points: Points
    core_points: list[Points]
    rss: list[float] = field(default_factory=list)
    pipeline: PipelineSample | None = None


def _read(path: Path) -> _Stored:
    with SessionReader(path) as reader, reader.reading():
        names = set(reader.series_names())
        return _Stored(
            steps=reader.steps(),
            agent_events=reader.events("agent"),
            opt_events=reader.events("optimize"),
            logs=reader.events("log"),
            meta=reader.meta(),
            cpu_points=reader.points("tree.cpu"),
            core_points=[
                reader.points(f"sys.cpu.{i}") for i in affinity() if f"sys.cpu.{i}" in names
            ],
            rss=[v for _ts, v, _e in reader.points("tree.rss") if v is not None],
            pipeline=reader.last_pipeline(),
        )


@dataclass
class _Steady:
    rate: float | None = None
    unit: Unit = "steps/s"
    compile_s: float | None = None
    batch: float | None = None
    stats: InputStats | None = None
    failed: str | None = None
    partial: bool = False


def _steady(stored: _Stored, warmup: int, steps: int | None) -> _Steady:
    """Throughput over the steps after the warm-up, of the busiest step source. A run too slow
    to get past its warm-up (an XLA compile of a large model on a CPU) is measured over the
    steps after its first: a partial throughput, not a failure."""
    counts: dict[tuple[str, int], int] = {}
    for s in stored.steps:
        counts[(s.source, s.pid)] = counts.get((s.source, s.pid), 0) + 1
    if not counts:
        return _Steady(failed="no steps recorded (is the loop visible to the agent?)")
    key = max(counts, key=lambda k: counts[k])
    main = sorted((s for s in stored.steps if (s.source, s.pid) == key), key=lambda s: s.step)
    warm, steady = main[:warmup], main[warmup:]
    if steps is not None:
        steady = steady[:steps]
    partial = not steady and len(main) >= 2
    if partial:
        warm, steady = main[:1], main[1:]
    if not steady:
        return _Steady(failed="no steps after warm-up")
    out = _Steady(partial=partial)
    span = steady[-1].ts - steady[0].start
    bs = [s.batch_size for s in steady if s.batch_size]
    if span > 0:
        out.rate = len(steady) / span
        if bs and len(bs) == len(steady):
            out.rate, out.unit = sum(bs) / span, "samples/s"
    med = statistics.median(s.duration_s for s in steady)
    out.compile_s = sum(max(0.0, s.duration_s - med) for s in warm)
    out.batch = statistics.median(bs) if bs else None
    out.stats = input_stats(steady, stored.cpu_points, stored.core_points)
    return out


def _last_error(logs: Sequence[Event]) -> str | None:
    """The exception the workload's output ends with (its last ``SomethingError: ...`` line)."""
    for e in reversed(logs[-200:]):
        if RAISED.match(e.message):
            return e.message.strip()[:200]
    return None


def _exit_failure(meta: dict[str, Any], logs: Sequence[Event] = ()) -> str | None:
    """A workload that failed by itself (not stopped by compare's SIGTERM), with the exception
    it printed last when there is one (a DataLoader worker that raised, a dataset whose length
    lies)."""
    exit_code = meta.get("exit_code")
    end_reason = str(meta.get("end_reason") or "")
    if meta.get("stopped_job") is True:  # compare stopped it (it ran its steps)
        return None
    if (
        isinstance(exit_code, int)
        and exit_code not in (0, -15, 143)
        and ("target exited" in end_reason or exit_code > 0)
    ):
        raised = _last_error(logs)
        return f"exit code {exit_code}" + (f": {raised}" if raised else "")
    return None


def _toggles(
    stored: _Stored, spec: OptimizeSpec
) -> tuple[tuple[Toggle, ...], tuple[tuple[Toggle, str], ...]]:
    """Which toggles applied, and why the others did not, from each agent's last report.

    Every process of the job runs an agent (spawned children and ``python`` subprocesses get
    it through the environment): a toggle applied when it applied in any of them (a launcher
    that never imports torch beside trainers that do), and the reason given for one that
    applied nowhere is the one of the process that trained most (its steps), never a bystander's.
    """
    if not stored.agent_events:
        why = "no agent report (the agent did not start)"
        return (), tuple((t, why) for t in spec.toggles())
    last: dict[int, dict[str, Any]] = {}
    for e in stored.agent_events:  # in time order: each process's last report wins
        pid = e.data.get("pid")
        last[pid if isinstance(pid, int) else 0] = e.data
    steps: dict[int, int] = {}
    for s in stored.steps:
        steps[s.pid] = steps.get(s.pid, 0) + 1
    # the busiest trainer first, then the processes in the order they last reported
    order = sorted(last, key=lambda p: -steps.get(p, 0))
    applied: list[Toggle] = []
    reasons: dict[Toggle, str] = {}
    for pid in order:
        info = last[pid]
        hooks = info.get("hooks_applied")
        for h in hooks if isinstance(hooks, list) else []:
            if (t := toggle_of_hook(str(h))) is not None and t not in applied:
                applied.append(t)
        skipped = info.get("hooks_skipped")
        for pair in skipped if isinstance(skipped, list) else []:
            pair_ok = isinstance(pair, list | tuple) and len(pair) == 2
            if pair_ok and (t := toggle_of_hook(str(pair[0]))) is not None:
                reasons.setdefault(t, str(pair[1]))
    not_applied = [(t, why) for t, why in reasons.items() if t not in applied]
    return tuple(applied), tuple(not_applied)


def _verdict(path: Path) -> tuple[str | None, VerdictEvidence]:
    from sofa_top.recording.report import session_summary

    try:
        v = session_summary(path).get("verdict")
    except Exception:
        return None, NO_EVIDENCE
    if not isinstance(v, dict):
        return None, NO_EVIDENCE
    kind = v.get("kind")
    return (str(kind) if kind else None), parse_evidence(verdict_kind(kind), v.get("evidence"))


def _compile_s(steady: float | None, opt_events: Sequence[Event]) -> float | None:
    """The warm-up's excess over the steady steps, or the compile time the agent timed."""
    out = steady
    for e in opt_events:
        cs = e.data.get("compile_s")
        if isinstance(cs, (int, float)):
            out = max(out or 0.0, float(cs))
    return out


def _data_stream(opt_events: Sequence[Event]) -> DataStream | None:
    """The last data-check counts the agent sent (they are cumulative), with every print it
    reported, in order."""
    last: dict[str, object] | None = None
    prints: list[int] = []
    for e in opt_events:
        d = e.data.get("data_check")
        if isinstance(d, dict):
            last = d
            start, new = d.get("prints_from"), d.get("prints")
            if isinstance(start, int) and isinstance(new, list) and start == len(prints):
                prints += [p for p in new if isinstance(p, int)]
    if last is None:
        return None
    batches, repeats, epochs = last.get("batches"), last.get("repeats"), last.get("epoch_batches")
    if not isinstance(batches, int) or not isinstance(repeats, int):
        return None
    first = last.get("first_epoch")
    first_epoch = (
        (first[0], first[1])
        if isinstance(first, list) and len(first) == 2 and all(isinstance(n, int) for n in first)
        else None
    )
    return DataStream(
        batches,
        repeats,
        tuple(n for n in (epochs if isinstance(epochs, list) else []) if isinstance(n, int)),
        first_epoch,
        tuple(prints),
    )


def _blocked(opt_events: Sequence[Event]) -> tuple[tuple[Toggle, str], ...]:
    """(toggle, obstacle) for each typed reason the agent gave for not applying a toggle."""
    out: list[tuple[Toggle, str]] = []
    for e in opt_events:
        t, kind = e.data.get("toggle"), e.data.get("blocked")
        toggle = toggle_of(t) if isinstance(t, str) else None
        if toggle is not None and isinstance(kind, str) and (toggle, kind) not in out:
            out.append((toggle, kind))
    return tuple(out)


def _serial_source(stored: _Stored, batch: float | None) -> tuple[str | None, float | None]:
    """The source no toggle parallelizes, and its own time per step when the agent timed it."""
    v = view(stored.pipeline)
    src = v.serial_source
    if src is None:
        return None, None
    per_step = None
    if src.self_time_s is not None:
        # elements batched after the source: each step takes a batch of them
        outer = v.stages[: v.stages.index(src)]
        batched = any(s.kind == "batch" for s in outer)
        per_step = src.self_time_s * ((batch or 1.0) if batched else 1.0)
    return src.name, per_step


def analyze_session(
    path: str | Path,
    warmup: int,
    steps: int | None,
    spec: OptimizeSpec,
    memory: int | None = None,
) -> RunOutcome:
    """One run's ``RunOutcome``; ``memory``: its peak tree PSS (``record_one``'s result)."""
    stored = _read(Path(path))
    st = _steady(stored, warmup, steps)
    applied, not_applied = _toggles(stored, spec)
    verdict, evidence = _verdict(Path(path))
    par = [int(v) for e in stored.opt_events if isinstance(v := e.data.get("parallelism"), int)]
    serial, serial_s = _serial_source(stored, st.batch)
    return RunOutcome(
        session=str(path),
        rate=st.rate,
        unit=st.unit,
        compile_s=_compile_s(st.compile_s, stored.opt_events),
        verdict=verdict,
        applied=applied,
        not_applied=not_applied,
        where=tuple(str(e.data["where"]) for e in stored.opt_events if e.data.get("where")),
        nonfinite_loss=any(_LOSS_BAD.search(e.message) for e in stored.logs),
        failed=_exit_failure(stored.meta, stored.logs) or st.failed,
        parallelism=max(par) if par else None,
        memory=memory,
        rss=int(max(stored.rss)) if stored.rss else None,
        batch_size=st.batch,
        input=st.stats,
        evidence=evidence,
        loss=logged_loss([e.message for e in stored.logs]),
        data=_data_stream(stored.opt_events),
        blocked=_blocked(stored.opt_events),
        serial_source=serial,
        serial_s_per_step=serial_s,
        partial=st.partial,
        trainers=max(1, len({s.pid for s in stored.steps})),
    )
