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
               "verdict": KIND|null,         # recording.report.session_summary, last repeat
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
import json
import math
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

from sofa_top.model.errors import UserError
from sofa_top.optimizers.headroom import (
    SEARCH_LEVELS,
    Diagnosis,
    InputStats,
    affinity,
    diagnose,
    diagnosis_json,
    headroom,
    headroom_line,
    input_stats,
    parallelism_setting,
    ram_total,
    search_parallelism,
    tree_memory,
    usable_cores,
    wants_search,
    with_parallelism,
)

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
            "diagnosis": diagnosis_json(self.diagnosis),
            "search": self.search,
        }


def _toggle(hook: str) -> str:
    return hook[4:].replace("-", "_")


# Batches each input producer holds ready before the loop asks: the agent's DataLoader
# prefetch_factor (sofa_top.agent.optimize), about what a tf.data map + prefetch keeps in flight.
BUFFERED_PER_PRODUCER = 4


def run_warmup(warmup_steps: int, optimize: dict[str, Any], cores: int) -> int:
    """The steps to exclude from a run: ``warmup_steps``, but at least twice the batches its
    input producers buffer. Until that buffer is drained a run measures how fast the loop
    empties it, not its input stage (16 DataLoader workers hold 64 batches: 20 measured steps
    came out at 1.3-1.8x what 16 producers can deliver, and every search level looked better).
    Twice: the producers refill it while the loop drains it, which takes B c / (c - p) steps
    for a buffer of B, a loop that could take c steps/s and producers that make p; that is
    under 2 B wherever the loop is at least twice as fast as its input (input-bound)."""
    producers = parallelism_setting(optimize) or (cores if optimize.get("prefetch") else 0)
    return max(warmup_steps, 2 * BUFFERED_PER_PRODUCER * producers)


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
    from sofa_top.cli.main import _open_launch

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


def analyze_session(
    path: str | Path,
    warmup: int,
    steps: int | None,
    optimize: dict[str, Any],
    memory: int | None = None,
) -> RunOutcome:
    """Throughput, compile time, verdict, toggles, loss health and input numbers of one run.

    ``memory``: the run's peak tree PSS, as ``_record_one`` returned it."""
    from sofa_top.recording.report import session_summary
    from sofa_top.recording.store import SessionReader

    reader = SessionReader(Path(path))
    try:
        all_steps = reader.steps()
        agent_events = reader.events("agent")
        opt_events = reader.events("optimize")
        logs = reader.events("log")
        meta = reader.meta()
        cpu_points = reader.points("tree.cpu")
        names = set(reader.series_names())
        core_points = [reader.points(f"sys.cpu.{i}") for i in affinity() if f"sys.cpu.{i}" in names]
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
        warmup = run_warmup(warmup_steps, opt, cores)
        try:
            memory = _record_one(
                list(cmd), opt, path, f"compare-{name}", steps, seconds, warmup, timeout_s
            )
            return analyze_session(path, warmup, steps, opt, memory)
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
    searched = [c for c in configs if wants_search(table[c])]
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
                out = record(f"search-p{p}", with_parallelism(pre, p), path)
                rate = "-" if out.rate is None else f"{out.rate:.2f} {out.unit}"
                say(f"  search p={p}: {rate}{'  FAILED: ' + out.failed if out.failed else ''}")
                return out

            search_out = search_parallelism(diag0, measure, ram_total(), search_levels)
            say(f"search: parallelism {search_out['chosen']} ({search_out['stop']})")
    chosen = search_out.get("chosen")
    if isinstance(chosen, int):
        for c in searched:
            table[c] = with_parallelism(table[c], chosen)
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
        from sofa_top.recording.paths import sessions_dir

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
