"""``sofa-top compare``: re-run a command under optimizer configurations and compare throughput.

Each configuration (``baseline``, one per toggle, ``all``) is a set of toggles the in-process
agent applies (``settings["optimize"]``, see ``sofa_top.agent.optimize``). Every run is a real
session file (launch mode, headless, no stack sampling); it is stopped once ``warmup_steps`` +
``steps`` steps are recorded (or ``seconds`` after the warm-up steps). Repeats are interleaved
(A B C A B C ...) so that slow drift of the machine cancels out. Throughput is measured on the
agent's steps after the warm-up ones: steps/s, or samples/s when the batch size is known.

Input causes. The first baseline run is diagnosed before the others run: its verdict's
``input_cause`` (cpu / latency / mixed) picks the prefetch parallelism (``search_parallelism``).
CPU-bound input stays at the core count. Input that waits (latency, mixed) is measured at cores
x 1, 2, 4, 8, 16 (one run each, prefetch configuration) until a level is less than 10% better
than the best so far, the tree's memory (PSS: forked workers share pages that a sum of RSS
counts once per worker) passes 2x the baseline's, or the next level would pass half the RAM.
``--parallelism N`` skips the search.

Headroom (``headroom``), per configuration, from the baseline's measured steps: compute-only
rate 1 / median(step - input wait); CPU bound free cores / CPU-seconds per step (``tree.cpu``;
the configuration's own cost where measured, since parallel input costs more CPU per step than
serial; free: less what other processes used of the same cores); for latency/mixed causes,
the latency bound P / input time per step (the median wait for serial input, else p0 x the
median step). The headroom is the smallest of them, in the run's unit; ``fraction_reached`` is
the run's median throughput over it.

JSON schema (``compare --json``)::

    {"schema": 2, "cmd": [ARG, ...], "repeats": N, "steps": K|null, "seconds": S|null,
     "warmup_steps": W,
     "runs": [{"config": NAME, "optimize": {settings["optimize"]},
               "applied": [TOGGLE, ...], "not_applied": [[TOGGLE, REASON], ...],
               "throughput": {"median": X|null, "min": X|null, "max": X|null,
                              "unit": "samples/s"|"steps/s"},
               "speedup": RATIO|null,        # median / baseline median
               "verdict": KIND|null,         # sofa_top.report.session_summary, last repeat
               "compile_s": S|null,          # median excess of the warm-up steps over steady
               "flags": [FLAG, ...],         # toggle-not-applied, slower-than-baseline,
                                             # non-finite-loss, run-failed
               "where": [STR, ...],          # what each applied toggle changed
               "errors": [STR, ...],
               "sessions": [PATH, ...],
               "parallelism": N|null,        # the prefetch parallelism this config asked for
               "headroom": {"throughput": X|null,        # best reachable, in "unit"
                            "fraction_reached": F|null,  # throughput median / headroom
                            "unit": "samples/s"|"steps/s",
                            "bound": "compute"|"cores"|"latency"|null,  # the binding one
                            "cores": N|null, "parallelism": P|null,     # P used by "latency"
                            "free_cores": C|null,        # cores less other processes' use
                            "cpu_per_step_s": S|null,    # CPU cost used by "cores"
                            "text": STR|null}}],         # "at 96% of what 2 cores allow"
     "best": NAME|null,
     "changes": [STR, ...],                  # code changes that reproduce "best"
     "diagnosis": null | {                   # the baseline runs (medians; cause: the first's)
         "cause": "cpu"|"latency"|"mixed"|null, "input_fraction": F|null,
         "input_cpu_cores": C|null, "input_parallelism": P0|null, "cores": N,
         "compute_s": S|null, "input_s": S|null, "cpu_per_step_s": S|null,
         "batch_size": B|null, "memory": BYTES|null, "rss": BYTES|null,   # PSS / summed RSS
         "others_cores": C|null,             # cores other processes kept busy meanwhile
         "bounds": {"compute_steps_s": X|null, "cores_steps_s": X|null,
                    "latency_steps_s_per_parallel": X|null}},
     "search": {} | {"cause": CAUSE|null, "chosen": N|null, "stop": STR,
                     "levels": [{"parallelism": N, "throughput": X|null, "unit": UNIT,
                                 "memory": BYTES|null, "rss": BYTES|null,
                                 "applied": BOOL, "failed": STR|null}, ...]}}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sofa_top.errors import UserError

CONFIGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "prefetch": {"prefetch": True},
    "xla": {"xla": True},
    "depth-first": {"depth_first": True},
    "all": {"prefetch": True, "xla": True, "depth_first": True},
}
DEFAULT_CONFIGS = ("baseline", "prefetch", "xla", "depth-first", "all")
_LOSS_BAD = re.compile(r"loss\W{0,3}[^\n]{0,40}?\b(nan|-?inf(inity)?)\b", re.IGNORECASE)

OnProgress = Callable[[str], None]


@dataclass
class RunOutcome:
    """One repeat of one configuration."""

    session: str
    rate: float | None  # steps/s or samples/s, per ``unit``
    unit: str
    compile_s: float | None
    verdict: str | None
    applied: list[str]
    not_applied: list[tuple[str, str]]
    where: list[str]
    nonfinite_loss: bool
    failed: str | None
    parallelism: int | None = None  # what the prefetch toggle applied (optimize events)
    memory: int | None = None  # peak tree PSS in bytes (sampled by ``_record_one``)
    rss: int | None = None  # peak of the stored ``tree.rss`` series (sum of RSS)
    batch_size: float | None = None  # median over the measured steps
    input: InputStats | None = None
    evidence: dict[str, Any] = field(default_factory=dict)  # the verdict's


@dataclass
class InputStats:
    """One run's steady steps, as the headroom model needs them (seconds per step)."""

    compute_s: float  # median(step duration - input wait)
    input_s: float  # median input wait
    step_s: float  # median step duration
    cpu_per_step_s: float | None  # tree CPU-seconds over the measured window / steps
    cores_busy: float | None = None  # the tree's mean cores busy over the window
    others_cores: float | None = None  # cores busy with other processes, on the usable ones


@dataclass
class Diagnosis:
    """The baseline's input bottleneck: its cause and the numbers the headroom model uses."""

    cause: str | None  # cpu / latency / mixed (the verdict's evidence), None: not input-bound
    input_fraction: float | None
    input_cpu_cores: float | None
    input_parallelism: int | None  # p0: the baseline's own input parallelism
    cores: int
    compute_s: float | None
    input_s: float | None  # input time per step: median wait (serial), else p0 x median step
    cpu_per_step_s: float | None
    batch_size: float | None
    memory: int | None
    rss: int | None
    others_cores: float | None = None  # cores other processes kept busy meanwhile

    def bounds(
        self,
        parallelism: int | None,
        cpu_per_step_s: float | None = None,
        free_cores: float | None = None,
    ) -> dict[str, float]:
        """Upper bounds on steps/s: compute-only, the cores' CPU, and P parallel waits.

        ``cpu_per_step_s``: a configuration's own CPU cost per step, instead of the
        baseline's; ``free_cores``: the cores left by other processes, instead of all."""
        out: dict[str, float] = {}
        cpu = cpu_per_step_s or self.cpu_per_step_s
        if self.compute_s and self.compute_s > 0:
            out["compute"] = 1.0 / self.compute_s
        if cpu and cpu > 0:
            out["cores"] = (free_cores or self.cores) / cpu
        if self.cause in ("latency", "mixed") and self.input_s and self.input_s > 0:
            out["latency"] = (parallelism or 1) / self.input_s
        return out


@dataclass
class ConfigResult:
    config: str
    optimize: dict[str, Any]
    applied: list[str] = field(default_factory=list)
    not_applied: list[tuple[str, str]] = field(default_factory=list)
    throughput: dict[str, Any] = field(default_factory=dict)
    speedup: float | None = None
    verdict: str | None = None
    compile_s: float | None = None
    flags: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    parallelism: int | None = None
    headroom: dict[str, Any] = field(default_factory=dict)
    outcomes: list[RunOutcome] = field(default_factory=list)


@dataclass
class CompareResult:
    cmd: list[str]
    repeats: int
    steps: int | None
    seconds: float | None
    warmup_steps: int
    runs: list[ConfigResult]
    best: str | None
    changes: list[str]
    diagnosis: Diagnosis | None = None
    search: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON object documented in the module docstring."""
        runs = []
        for r in self.runs:
            d = asdict(r)
            d.pop("outcomes")
            d["not_applied"] = [list(x) for x in r.not_applied]
            runs.append(d)
        return {
            "schema": 2,
            "cmd": self.cmd,
            "repeats": self.repeats,
            "steps": self.steps,
            "seconds": self.seconds,
            "warmup_steps": self.warmup_steps,
            "runs": runs,
            "best": self.best,
            "changes": self.changes,
            "diagnosis": _diagnosis_json(self.diagnosis),
            "search": self.search,
        }


def _diagnosis_json(d: Diagnosis | None) -> dict[str, Any] | None:
    if d is None:
        return None
    out = asdict(d)
    bounds = d.bounds(d.input_parallelism)
    out["bounds"] = {
        "compute_steps_s": bounds.get("compute"),
        "cores_steps_s": bounds.get("cores"),
        "latency_steps_s_per_parallel": (1.0 / d.input_s) if d.input_s else None,
    }
    return out


def _toggle(hook: str) -> str:
    return hook[4:].replace("-", "_")


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which the workload inherits."""
    return len(_affinity())


def tree_memory(pid: int) -> int | None:
    """Proportional set size (PSS) of ``pid`` and its descendants, in bytes.

    PSS, not RSS: forked DataLoader workers share most of their pages with the parent, and a
    sum of RSS counts those once per worker (16 workers: ~13x the baseline's RSS for ~1.3x the
    memory actually used). Falls back to RSS where PSS cannot be read."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            total += int(getattr(info, "pss", 0) or info.rss)
        except psutil.AccessDenied:
            with contextlib.suppress(psutil.Error):
                total += int(p.memory_info().rss)
        except psutil.Error:
            pass  # exited meanwhile
    return total or None


def _record_one(
    cmd: list[str],
    optimize: dict[str, Any],
    path: Path,
    name: str,
    target_steps: int | None,
    seconds: float | None,
    warmup: int,
    timeout_s: float,
) -> int | None:
    """Launch ``cmd`` headless under the agent and stop it once enough steps are recorded.

    Returns the peak memory (PSS, ``tree_memory``) of the workload's tree, sampled each second.
    """
    from sofa_top.cli import _open_launch

    args = argparse.Namespace(
        cmd=list(cmd),
        output=str(path),
        name=name,
        interval=0.2,  # tree.cpu over short measured windows (headroom's CPU per step)
        stack_rate=1.0,
        no_stacks=True,
    )
    run = _open_launch(args, "record", settings={"optimize": optimize})
    session = run.session
    session.start()
    t_end = time.monotonic() + timeout_s
    warm_at: float | None = None
    reason = "timeout"
    pid = run.popen.pid if run.popen is not None else None
    memory: int | None = None
    next_memory = time.monotonic() + 0.5
    while True:
        if pid is not None and time.monotonic() >= next_memory:
            m = tree_memory(pid)
            memory = max(memory or 0, m or 0) or None
            next_memory = time.monotonic() + 1.0
        if session.done or session.target_exited:
            reason = "target exited"
            break
        if time.monotonic() >= t_end:
            break
        session.wait(0.1)
        by_source: dict[tuple[str, int], int] = {}
        for s in session.steps():
            key = (s.source, s.pid)
            by_source[key] = max(by_source.get(key, 0), s.step + 1)
        n = max(by_source.values(), default=0)
        if target_steps is not None and n >= warmup + target_steps:
            reason = "enough steps"
            break
        if seconds is not None and n >= warmup:
            if warm_at is None:
                warm_at = time.monotonic()
            elif time.monotonic() - warm_at >= seconds:
                reason = "enough time"
                break
    time.sleep(0.3)  # the agent flushes every 0.1 s: let the last steps arrive
    if pid is not None:
        m = tree_memory(pid)
        memory = max(memory or 0, m or 0) or None
    finisher = threading.Thread(target=run.finish, args=(reason,), daemon=True)
    finisher.start()
    finisher.join(60.0)
    return memory


def _cores_busy(
    points: list[tuple[float, float | None, str | None]], t0: float, t1: float
) -> float | None:
    """Mean cores busy over [t0, t1] from ``tree.cpu`` (% of one core; each point is the mean
    since the previous one), weighted by overlap; the nearest point when none overlaps."""
    busy = weight = 0.0
    prev: float | None = None
    for ts, v, _err in points:
        if prev is not None and v is not None:
            overlap = min(ts, t1) - max(prev, t0)
            if overlap > 0:
                busy += v / 100.0 * overlap
                weight += overlap
        prev = ts
    if weight > 0:
        return busy / weight
    near = [(abs(ts - t1), v) for ts, v, _ in points if v is not None and ts >= t0]
    return min(near)[1] / 100.0 if near else None


Points = list[tuple[float, float | None, str | None]]


def input_stats(
    steady: Sequence[Any], cpu_points: Points, core_points: Sequence[Points] = ()
) -> InputStats | None:
    """The headroom model's numbers from a run's measured steps, its ``tree.cpu`` series and
    the ``sys.cpu.<i>`` series of the cores it may use (``core_points``)."""
    if not steady:
        return None
    compute = statistics.median(max(0.0, s.duration_s - s.input_wait_s) for s in steady)
    t0, t1 = steady[0].start, steady[-1].ts
    busy = _cores_busy(cpu_points, t0, t1) if t1 > t0 else None
    others: float | None = None
    per_core = [_cores_busy(p, t0, t1) for p in core_points] if t1 > t0 else []
    if busy is not None and per_core and all(c is not None for c in per_core):
        # what the machine's other processes (sofa-top included) took from the same cores
        others = max(0.0, sum(c or 0.0 for c in per_core) - busy)
    return InputStats(
        compute_s=compute,
        input_s=statistics.median(s.input_wait_s for s in steady),
        step_s=statistics.median(s.duration_s for s in steady),
        cpu_per_step_s=None if busy is None else busy * (t1 - t0) / len(steady),
        cores_busy=busy,
        others_cores=others,
    )


def analyze_session(
    path: str | Path,
    warmup: int,
    steps: int | None,
    optimize: dict[str, Any],
    memory: int | None = None,
) -> RunOutcome:
    """Throughput, compile time, verdict, toggles, loss health and input numbers of one run.

    ``memory``: the run's peak tree PSS, as ``_record_one`` returned it."""
    from sofa_top.report import session_summary
    from sofa_top.store import SessionReader

    reader = SessionReader(Path(path))
    try:
        all_steps = reader.steps()
        agent_events = reader.events("agent")
        opt_events = reader.events("optimize")
        logs = reader.events("log")
        meta = reader.meta()
        cpu_points = reader.points("tree.cpu")
        names = set(reader.series_names())
        core_points = [
            reader.points(f"sys.cpu.{i}") for i in _affinity() if f"sys.cpu.{i}" in names
        ]
        rss_points = [v for _ts, v, _e in reader.points("tree.rss") if v is not None]
    finally:
        reader.close()
    counts: dict[tuple[str, int], int] = {}
    for s in all_steps:
        counts[(s.source, s.pid)] = counts.get((s.source, s.pid), 0) + 1
    rate = compile_s = batch = None
    stats: InputStats | None = None
    unit = "steps/s"
    failed: str | None = None
    if counts:
        key = max(counts, key=lambda k: counts[k])
        main = sorted((s for s in all_steps if (s.source, s.pid) == key), key=lambda s: s.step)
        warm, steady = main[:warmup], main[warmup:]
        if steps is not None:
            steady = steady[:steps]
        if steady:
            span = steady[-1].ts - steady[0].start
            bs = [s.batch_size for s in steady if s.batch_size]
            if span > 0:
                rate = len(steady) / span
                if bs and len(bs) == len(steady):
                    rate = sum(bs) / span
                    unit = "samples/s"
            med = statistics.median(s.duration_s for s in steady)
            compile_s = sum(max(0.0, s.duration_s - med) for s in warm)
            batch = statistics.median(bs) if bs else None
            stats = input_stats(steady, cpu_points, core_points)
        else:
            failed = "no steps after warm-up"
    else:
        failed = "no steps recorded (is the loop visible to the agent?)"
    exit_code = meta.get("exit_code")
    end_reason = str(meta.get("end_reason") or "")
    if (
        failed is None
        and isinstance(exit_code, int)
        and exit_code not in (0, -15, 143)
        and ("target exited" in end_reason or exit_code > 0)
    ):
        failed = f"exit code {exit_code}"
    for e in opt_events:
        cs = e.data.get("compile_s")
        if isinstance(cs, (int, float)):
            compile_s = max(compile_s or 0.0, float(cs))
    applied: list[str] = []
    not_applied: list[tuple[str, str]] = []
    if agent_events:
        # the main process's last report
        info: dict[str, Any] = dict(agent_events[-1].data)
        hooks_applied = [str(h) for h in info.get("hooks_applied", [])]
        skipped = info.get("hooks_skipped", [])
        applied = [_toggle(h) for h in hooks_applied if h.startswith("opt:")]
        for h, r in skipped:
            if str(h).startswith("opt:"):
                not_applied.append((_toggle(str(h)), str(r)))
    else:
        not_applied = [(t, "no agent report (the agent did not start)") for t in optimize]
    where = [str(e.data.get("where")) for e in opt_events if e.data.get("where")]
    nonfinite = any(_LOSS_BAD.search(e.message) for e in logs)
    par = [int(v) for e in opt_events if isinstance(v := e.data.get("parallelism"), int)]
    verdict = None
    evidence: dict[str, Any] = {}
    try:
        v = session_summary(path).get("verdict")
        if isinstance(v, dict):
            verdict = v.get("kind")
            evidence = dict(v.get("evidence") or {})
    except Exception:
        verdict = None
    return RunOutcome(
        str(path), rate, unit, compile_s, verdict, applied, not_applied, where, nonfinite, failed,
        parallelism=max(par) if par else None,
        memory=memory,
        rss=int(max(rss_points)) if rss_points else None,
        batch_size=batch,
        input=stats,
        evidence=evidence,
    )  # fmt: skip


def _median(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def _summarize(cr: ConfigResult, baseline: float | None) -> None:
    outs = cr.outcomes
    rates = [o.rate for o in outs if o.rate is not None]
    units = {o.unit for o in outs if o.rate is not None}
    cr.throughput = {
        "median": _median(rates),
        "min": min(rates) if rates else None,
        "max": max(rates) if rates else None,
        "unit": units.pop() if len(units) == 1 else "steps/s",
    }
    comp = [o.compile_s for o in outs if o.compile_s is not None]
    cr.compile_s = _median(comp)
    cr.verdict = next((o.verdict for o in reversed(outs) if o.verdict), None)
    cr.sessions = [o.session for o in outs]
    wanted = list(cr.optimize)
    applied = {t for o in outs for t in o.applied}
    cr.applied = [t for t in wanted if t in applied]
    reasons: dict[str, str] = {}
    for o in outs:
        for t, r in o.not_applied:
            if t not in applied and t in wanted:
                reasons.setdefault(t, r)
    cr.not_applied = [(t, reasons.get(t, "not reported")) for t in wanted if t not in applied]
    cr.where = sorted({w for o in outs for w in o.where})
    cr.errors = [f"{Path(o.session).name}: {o.failed}" for o in outs if o.failed]
    flags = []
    if cr.not_applied:
        flags.append("toggle-not-applied")
    med = cr.throughput["median"]
    if baseline and med is not None:
        cr.speedup = med / baseline
        if cr.config != "baseline" and cr.speedup < 1.0:
            flags.append("slower-than-baseline")
    if any(o.nonfinite_loss for o in outs):
        flags.append("non-finite-loss")
    if any(o.failed for o in outs):
        flags.append("run-failed")
    cr.flags = flags
    cr.parallelism = parallelism_setting(cr.optimize)


def parallelism_setting(optimize: dict[str, Any]) -> int | None:
    """The ``parallelism`` a configuration's prefetch toggle asks for, else None."""
    pre = optimize.get("prefetch")
    if isinstance(pre, dict):
        n = pre.get("parallelism")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def diagnose(baseline: Sequence[RunOutcome], cores: int) -> Diagnosis | None:
    """The input bottleneck of the baseline runs: the first run's cause (what the search went
    by), the medians of their numbers."""
    ok = [o for o in baseline if o.input is not None and not o.failed]
    if not ok:
        return None
    ev = ok[0].evidence
    cause = ev.get("input_cause") if ok[0].verdict == "input-bound" else None
    p0 = ev.get("input_parallelism")
    p0 = p0 if isinstance(p0, int) and not isinstance(p0, bool) and p0 > 0 else None
    stats = [o.input for o in ok if o.input is not None]
    wait = statistics.median(x.input_s for x in stats)
    step = statistics.median(x.step_s for x in stats)

    def num(key: str) -> float | None:
        v = ev.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def med(vals: Sequence[float | int | None]) -> float | None:
        return _median([float(v) for v in vals if v is not None])

    mem, rss = med([o.memory for o in ok]), med([o.rss for o in ok])
    others = med([x.others_cores for x in stats])
    return Diagnosis(
        cause=cause if cause in ("cpu", "latency", "mixed") else None,
        input_fraction=num("input_fraction"),
        input_cpu_cores=num("input_cpu_cores"),
        input_parallelism=p0,
        cores=cores,
        compute_s=statistics.median(x.compute_s for x in stats),
        # p0 parallel producers fill one step's wait: each item takes p0 x the step
        input_s=wait if p0 is None or p0 <= 1 else p0 * step,
        cpu_per_step_s=med([x.cpu_per_step_s for x in stats]),
        batch_size=med([o.batch_size for o in ok]),
        memory=None if mem is None else int(mem),
        rss=None if rss is None else int(rss),
        others_cores=others,
    )


_BOUND_TEXT = {
    "compute": "the compute-only rate (no input wait)",
    "cores": "what {cores} cores allow",
    "latency": "what parallelism {p} allows",
}


def headroom(cr: ConfigResult, diag: Diagnosis | None) -> dict[str, Any]:
    """The best throughput the baseline's numbers say this configuration's input stage can
    reach on this machine, in the run's unit, and the fraction of it the run reached.

    The bounds are the baseline's (``Diagnosis.bounds``) except the CPU cost per step, which is
    the configuration's own where measured: parallel input costs more CPU per step than serial
    (IPC and pickling between DataLoader workers, tf.data's thread hand-offs, cores shared by
    SMT siblings; 8.6 vs 12.3 ms per step measured for ``input_shapes_torch.py --shape cpu``),
    and the baseline's cost would promise throughput that no setting reaches. Likewise the cores
    are those other processes left free during the configuration's runs (``others_cores``, from
    the per-core ``sys.cpu.<i>`` series): on a shared machine they are all it can have."""
    unit = cr.throughput.get("unit", "steps/s")
    p = cr.parallelism
    if p is None and diag is not None:
        # AUTOTUNE / default workers: about the core count; untouched: the baseline's own
        p = diag.cores if "prefetch" in cr.applied else (diag.input_parallelism or 1)
    stats = [o.input for o in cr.outcomes if o.input is not None]
    cpu = _median([x.cpu_per_step_s for x in stats if x.cpu_per_step_s])
    others = _median([x.others_cores for x in stats if x.others_cores is not None])
    busy = _median([x.cores_busy for x in stats if x.cores_busy is not None])
    free: float | None = None
    if diag is not None and others is not None:
        # never fewer than the tree itself got
        free = min(float(diag.cores), max(diag.cores - others, busy or 0.0))
    out: dict[str, Any] = {
        "throughput": None,
        "fraction_reached": None,
        "unit": unit,
        "bound": None,
        "cores": diag.cores if diag else None,
        "parallelism": p,
        "free_cores": free,
        "cpu_per_step_s": cpu or (diag.cpu_per_step_s if diag else None),
        "text": None,
    }
    bounds = diag.bounds(p, cpu, free) if diag is not None else {}
    if not bounds or diag is None:
        return out
    bound, rate = min(bounds.items(), key=lambda kv: kv[1])
    if unit == "samples/s":
        bs = _median([o.batch_size for o in cr.outcomes if o.batch_size]) or diag.batch_size
        if not bs:
            return out
        rate *= bs
    out["throughput"] = rate
    out["bound"] = bound
    med = cr.throughput.get("median")
    if med is not None and rate > 0:
        frac = med / rate
        out["fraction_reached"] = frac
        what = _BOUND_TEXT[bound].format(cores=diag.cores, p=p)
        if bound == "cores" and free is not None and diag.cores - free >= 0.05:
            what += f" ({diag.cores - free:.1f} of them busy elsewhere)"
        out["text"] = f"at {frac:.0%} of {what}"
    return out


def headroom_short(cr: ConfigResult) -> str:
    """``96% of 2 cores``, ``76% of P=16``, ``95% of compute``, or ``-``: for narrow tables."""
    h = cr.headroom
    frac, bound = h.get("fraction_reached"), h.get("bound")
    if frac is None or bound is None:
        return "-"
    what = {"cores": f"{h.get('cores')} cores", "latency": f"P={h.get('parallelism')}"}
    return f"{frac:.0%} of {what.get(bound, bound)}"


def headroom_line(cr: ConfigResult) -> str:
    """``1.38x — at 96% of what 2 cores allow``: speedup and headroom in one line."""
    sp = "-" if cr.speedup is None else f"{cr.speedup:.2f}x"
    text = cr.headroom.get("text")
    return f"{sp} — {text}" if text else sp


def changes_for(result: CompareResult, config: str | None) -> list[str]:
    """The code changes that reproduce what the agent did in ``config``."""
    cr = next((r for r in result.runs if r.config == config), None)
    if cr is None:
        return []
    out: list[str] = []
    where = " ".join(cr.where)
    if "prefetch" in cr.applied:
        n = cr.parallelism
        if "tf.data" in where and n is None:
            out.append(
                "tf.data: `ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)` (same for "
                "interleave) and add `.prefetch(tf.data.AUTOTUNE)` after `.batch(...)`"
            )
        elif "tf.data" in where:
            out.append(
                f"tf.data: `ds.map(f, num_parallel_calls={n})` (same for interleave), add "
                "`.prefetch(tf.data.AUTOTUNE)` after `.batch(...)`, and "
                f"`options.threading.private_threadpool_size = {n}` "
                "(`ds = ds.with_options(options)`)"
            )
        m = re.search(r"DataLoader\(([^)]*)\)", where)
        if m:
            out.append(f"PyTorch: `DataLoader(..., {m.group(1)})`")
    if "xla" in cr.applied:
        if "tensorflow" in where:
            out.append(
                "TF: `tf.config.optimizer.set_jit('autoclustering')` (or env "
                f"TF_XLA_FLAGS='{_xla_flags()}'); `@tf.function(jit_compile=True)` on the step"
            )
        if "keras" in where:
            out.append("Keras: `model.compile(..., jit_compile=True)`")
        if "torch:" in where:
            out.append("PyTorch: `model.compile()` (torch.compile in place) before the loop")
    if "depth_first" in cr.applied:
        out.append("PyTorch: `model = sofa_top.optimizers.depth_first(model)`")
    return out


def _xla_flags() -> str:
    from sofa_top.agent.optimize import XLA_FLAGS

    return XLA_FLAGS


SEARCH_LEVELS = 5  # parallelism levels tried at most: cores x 1, 2, 4, 8, 16
SEARCH_GAIN = 1.10  # a level must beat the best so far by 10% for the search to go on
SEARCH_MEMORY_GROWTH = 2.0  # stop when the tree's memory passes this multiple of baseline's
SEARCH_MEMORY_SHARE = 0.5  # ... or the next level would pass this share of the machine's RAM


def _ram() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def _wants_search(optimize: dict[str, Any]) -> bool:
    pre = optimize.get("prefetch")
    return pre is True or (isinstance(pre, dict) and parallelism_setting(optimize) is None)


def _with_parallelism(optimize: dict[str, Any], n: int) -> dict[str, Any]:
    pre = optimize.get("prefetch")
    opts = dict(pre) if isinstance(pre, dict) else {}
    return {**optimize, "prefetch": {**opts, "parallelism": n}}


def search_parallelism(
    diag: Diagnosis,
    measure: Callable[[int], RunOutcome],
    ram: int | None = None,
    levels_max: int = SEARCH_LEVELS,
) -> dict[str, Any]:
    """Pick the prefetch parallelism from the baseline's diagnosis.

    cpu-bound input stays at the core count (more producers only share the same cores). For
    input that waits (latency, mixed), ``measure`` runs the prefetch configuration at cores x
    1, 2, 4, ... and the search stops when a level is less than ``SEARCH_GAIN`` better than the
    best so far, when the tree's memory passes ``SEARCH_MEMORY_GROWTH`` x the baseline's, or
    when the next level's projected memory would pass ``SEARCH_MEMORY_SHARE`` of ``ram``.
    Returns the ``search`` object of ``compare --json``."""
    levels: list[dict[str, Any]] = []
    out: dict[str, Any] = {"cause": diag.cause, "levels": levels, "chosen": None, "stop": None}
    if diag.cause == "cpu":
        out["chosen"] = diag.cores
        out["stop"] = "cpu-bound input: parallelism stays at the core count"
        return out
    if diag.cause not in ("latency", "mixed"):
        out["stop"] = "baseline not input-bound: no search (prefetch defaults)"
        return out
    best_p: int | None = None
    best_rate = 0.0
    last: tuple[int, int] | None = None  # (parallelism, memory) of the last level measured
    stop = "largest level reached"
    for k in range(levels_max):
        p = diag.cores * 2**k
        if ram and diag.memory and last is not None:
            # memory grows about linearly with the producers (workers, threads, buffers)
            projected = diag.memory + (last[1] - diag.memory) * p / last[0]
            if projected > SEARCH_MEMORY_SHARE * ram:
                stop = f"parallelism {p} would take over half the RAM"
                break
        o = measure(p)
        levels.append(
            {
                "parallelism": p,
                "throughput": o.rate,
                "unit": o.unit,
                "memory": o.memory,
                "rss": o.rss,
                "applied": "prefetch" in o.applied,
                "failed": o.failed,
            }
        )
        if o.failed or o.rate is None or o.nonfinite_loss:
            stop = f"parallelism {p}: " + (o.failed or "no throughput / non-finite loss")
            break
        if "prefetch" not in o.applied:
            stop = "the prefetch toggle did not apply: parallelism changes nothing"
            break
        if diag.memory and o.memory and o.memory > SEARCH_MEMORY_GROWTH * diag.memory:
            stop = f"parallelism {p}: memory {o.memory / diag.memory:.1f}x the baseline's"
            break
        if o.memory is not None:
            last = (p, o.memory)
        if best_p is not None and o.rate < SEARCH_GAIN * best_rate:
            stop = f"parallelism {p}: less than {SEARCH_GAIN - 1:.0%} better than {best_p}"
            break
        best_p, best_rate = p, o.rate
    out["chosen"] = best_p
    out["stop"] = stop
    return out


def run_compare(
    cmd: Sequence[str],
    configs: Sequence[str] = DEFAULT_CONFIGS,
    repeats: int = 3,
    steps: int | None = 50,
    seconds: float | None = None,
    warmup_steps: int = 5,
    on_progress: OnProgress | None = None,
    out_dir: str | Path | None = None,
    timeout_s: float = 600.0,
    optimize: dict[str, dict[str, Any]] | None = None,
    parallelism: int | None = None,
    search: bool = True,
    search_levels: int = SEARCH_LEVELS,
) -> CompareResult:
    """Run ``cmd`` under each configuration, ``repeats`` times interleaved; compare throughput.

    ``optimize`` maps extra (or overriding) configuration names to ``settings["optimize"]``.
    The first baseline run is diagnosed before the others: prefetch configurations without a
    ``parallelism`` of their own get the one ``search_parallelism`` picks (``search``), or
    ``parallelism`` when given; the search tries at most ``search_levels`` levels."""
    if not cmd:
        raise UserError("compare needs a command: sofa-top compare -- python train.py")
    if (steps is None) == (seconds is None):
        raise UserError("compare needs exactly one of steps or seconds")
    if parallelism is not None and parallelism < 1:
        raise UserError("--parallelism must be at least 1")
    table = {**CONFIGS, **(optimize or {})}
    for c in configs:
        if c not in table:
            raise UserError(f"unknown configuration {c!r} (known: {', '.join(table)})")
    base = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="sofa-top-compare-"))
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    say = on_progress or (lambda _m: None)
    cores = usable_cores()

    def record(name: str, opt: dict[str, Any], path: Path) -> RunOutcome:
        try:
            memory = _record_one(
                list(cmd), opt, path, f"compare-{name}", steps, seconds, warmup_steps, timeout_s
            )
            return analyze_session(path, warmup_steps, steps, opt, memory)
        except UserError:
            raise
        except Exception as e:
            return RunOutcome(str(path), None, "steps/s", None, None, [], [], [], False, repr(e))

    def run(c: str, i: int) -> RunOutcome:
        path = base / f"compare-{stamp}-{c}-{i + 1}.sofa"
        say(f"run {i + 1}/{repeats} {c}: {path}")
        out = record(c, table[c], path)
        results[c].outcomes.append(out)
        rate = "-" if out.rate is None else f"{out.rate:.2f} {out.unit}"
        say(f"  {c}: {rate}{'  FAILED: ' + out.failed if out.failed else ''}")
        return out

    results = {c: ConfigResult(c, dict(table[c])) for c in configs}
    searched = [c for c in configs if _wants_search(table[c])]
    search_out: dict[str, Any] = {}
    first_done = False
    if searched and parallelism is not None:
        search_out = {"cause": None, "levels": [], "chosen": parallelism, "stop": "given"}
    elif searched and search and "baseline" in results:
        run("baseline", 0)
        first_done = True
        diag0 = diagnose(results["baseline"].outcomes, cores)
        if diag0 is not None:
            say(f"diagnosis: input cause {diag0.cause or '-'}")
            pre = table[searched[0]]

            def measure(p: int) -> RunOutcome:
                path = base / f"compare-{stamp}-search-p{p}.sofa"
                say(f"search parallelism {p}: {path}")
                out = record(f"search-p{p}", _with_parallelism(pre, p), path)
                rate = "-" if out.rate is None else f"{out.rate:.2f} {out.unit}"
                say(f"  search p={p}: {rate}{'  FAILED: ' + out.failed if out.failed else ''}")
                return out

            search_out = search_parallelism(diag0, measure, _ram(), search_levels)
            say(f"search: parallelism {search_out['chosen']} ({search_out['stop']})")
    chosen = search_out.get("chosen")
    if isinstance(chosen, int):
        for c in searched:
            table[c] = _with_parallelism(table[c], chosen)
            results[c].optimize = dict(table[c])
    for i in range(repeats):
        for c in configs:
            if i == 0 and c == "baseline" and first_done:
                continue
            run(c, i)
    base_rates = [o.rate for o in results.get("baseline", ConfigResult("", {})).outcomes]
    baseline = _median([r for r in base_rates if r is not None])
    diag = diagnose(results["baseline"].outcomes, cores) if "baseline" in results else None
    for cr in results.values():
        _summarize(cr, baseline)
        cr.headroom = headroom(cr, diag)
    candidates = [
        r
        for r in results.values()
        if r.throughput.get("median") is not None
        and "run-failed" not in r.flags
        and "non-finite-loss" not in r.flags
    ]
    best = max(candidates, key=lambda r: r.throughput["median"]).config if candidates else None
    result = CompareResult(
        list(cmd), repeats, steps, seconds, warmup_steps, list(results.values()), best, [],
        diagnosis=diag, search=search_out,
    )  # fmt: skip
    result.changes = changes_for(result, best)
    return result


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def headroom_cell(cr: ConfigResult) -> str:
    """``at 96% of what 2 cores allow (1234 samples/s)``, or ``-``."""
    h = cr.headroom
    if not h.get("text"):
        return "-"
    return f"{h['text']} ({_fmt(h.get('throughput'), '.1f')} {h.get('unit', '')})"


def diagnosis_lines(result: CompareResult) -> list[str]:
    """The baseline's input cause and the parallelism search, in a few plain lines."""
    d = result.diagnosis
    lines: list[str] = []
    if d is not None and d.cause:
        parts = [f"input cause: {d.cause}"]
        if d.input_cpu_cores is not None:
            parts.append(f"{d.input_cpu_cores:.2f} cores busy producing input")
        if d.input_s is not None:
            parts.append(f"{d.input_s * 1e3:.1f} ms input / step")
        if d.compute_s is not None:
            parts.append(f"{d.compute_s * 1e3:.1f} ms compute / step")
        parts.append(f"{d.cores} cores")
        lines.append(", ".join(parts))
    s = result.search
    if s.get("levels"):
        tried = ", ".join(
            f"{lv['parallelism']}: {_fmt(lv.get('throughput'), '.1f')}" for lv in s["levels"]
        )
        lines.append(f"parallelism search ({s['levels'][0].get('unit', '')}): {tried}")
    if s.get("chosen") is not None or s.get("stop"):
        lines.append(f"parallelism: {s.get('chosen') or 'default'} ({s.get('stop')})")
    return lines


def render_compare(result: CompareResult, console: Any = None) -> None:
    """A rich table of the comparison and the code changes that reproduce the best one."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"sofa-top compare ({result.repeats} repeat(s), interleaved)")
    for col in ("config", "throughput (median, min-max)", "speedup", "compile s", "verdict"):
        t.add_column(col, justify="right" if col in ("speedup", "compile s") else "left")
    t.add_column("headroom")
    t.add_column("applied / flags")
    for r in result.runs:
        tp = r.throughput
        thr = f"{_fmt(tp.get('median'))} ({_fmt(tp.get('min'))}-{_fmt(tp.get('max'))}) " + str(
            tp.get("unit", "")
        )
        notes = ", ".join(r.applied) or "-"
        if r.not_applied:
            notes += "; not applied: " + "; ".join(f"{t_}: {why}" for t_, why in r.not_applied)
        if r.flags:
            notes += f" [{', '.join(r.flags)}]"
        if r.parallelism is not None:
            notes += f" (parallelism {r.parallelism})"
        name = f"[bold]{r.config}[/bold]" if r.config == result.best else r.config
        sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        t.add_row(
            name, thr, sp, _fmt(r.compile_s, ".1f"), r.verdict or "-", headroom_cell(r), notes
        )
    console.print(t)
    for line in diagnosis_lines(result):
        console.print(line, highlight=False)
    best = next((r for r in result.runs if r.config == result.best), None)
    if best is not None:
        console.print(f"best: [bold]{result.best}[/bold]: {headroom_line(best)}")
    for c in result.changes:
        console.print(f"  - {c}")
    for r in result.runs:
        for e in r.errors:
            console.print(f"[red]{r.config}: {e}[/red]")


def add_compare_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to ``build_parser``'s subparsers."""
    c: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="re-run CMD under optimizer configurations and compare throughput",
        usage="sofa-top compare [--configs LIST] [--repeats N] [--steps K | --seconds S] "
        "[--parallelism N] [--json] -- CMD [ARGS...]",
    )
    c.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"comma-separated, from {', '.join(CONFIGS)} (default: all of them)",
    )
    c.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per config (3)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, metavar="K", help="measured steps per run (default 50)")
    g.add_argument("--seconds", type=float, metavar="S", help="measured seconds per run")
    c.add_argument("--warmup-steps", type=int, default=5, metavar="W", help="excluded steps (5)")
    c.add_argument(
        "--parallelism",
        type=int,
        metavar="N",
        help="prefetch parallelism (tf.data calls and pool, DataLoader workers); default: "
        "from the baseline's diagnosis, searched when the input waits",
    )
    c.add_argument("--json", action="store_true", help="print the JSON result on stdout")
    c.add_argument("-o", "--output-dir", metavar="DIR", help="where the session files go")
    return c


def compare_main(args: argparse.Namespace) -> int:
    """Run ``sofa-top compare`` (``args.cmd`` holds the command after ``--``)."""
    cmd = list(getattr(args, "cmd", []) or [])
    if not cmd:
        raise UserError("compare needs a command: sofa-top compare -- python train.py")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        raise UserError("--repeats and --steps must be at least 1")
    steps = args.steps if args.steps is not None or args.seconds is not None else 50
    out_dir = args.output_dir
    if out_dir is None:
        from sofa_top.paths import sessions_dir

        out_dir = sessions_dir()
    result = run_compare(
        cmd,
        configs,
        repeats=args.repeats,
        steps=steps,
        seconds=args.seconds,
        warmup_steps=max(0, args.warmup_steps),
        on_progress=lambda m: print(m, file=sys.stderr, flush=True),
        out_dir=out_dir,
        parallelism=getattr(args, "parallelism", None),
    )
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_compare(result)
    return 0
