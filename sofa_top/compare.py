"""``sofa-top compare``: re-run a command under optimizer configurations and compare throughput.

Each configuration (``baseline``, one per toggle, ``all``) is a set of toggles the in-process
agent applies (``settings["optimize"]``, see ``sofa_top.agent.optimize``). Every run is a real
session file (launch mode, headless, no stack sampling); it is stopped once ``warmup_steps`` +
``steps`` steps are recorded (or ``seconds`` after the warm-up steps). Repeats are interleaved
(A B C A B C ...) so that slow drift of the machine cancels out. Throughput is measured on the
agent's steps after the warm-up ones: steps/s, or samples/s when the batch size is known.

JSON schema (``compare --json``)::

    {"schema": 1, "cmd": [ARG, ...], "repeats": N, "steps": K|null, "seconds": S|null,
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
               "sessions": [PATH, ...]}],
     "best": NAME|null,
     "changes": [STR, ...]}                  # code changes that reproduce "best"
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

    def to_json(self) -> dict[str, Any]:
        """The JSON object documented in the module docstring."""
        runs = []
        for r in self.runs:
            d = asdict(r)
            d.pop("outcomes")
            d["not_applied"] = [list(x) for x in r.not_applied]
            runs.append(d)
        return {
            "schema": 1,
            "cmd": self.cmd,
            "repeats": self.repeats,
            "steps": self.steps,
            "seconds": self.seconds,
            "warmup_steps": self.warmup_steps,
            "runs": runs,
            "best": self.best,
            "changes": self.changes,
        }


def _toggle(hook: str) -> str:
    return hook[4:].replace("-", "_")


def _record_one(
    cmd: list[str],
    optimize: dict[str, Any],
    path: Path,
    name: str,
    target_steps: int | None,
    seconds: float | None,
    warmup: int,
    timeout_s: float,
) -> None:
    """Launch ``cmd`` headless under the agent and stop it once enough steps are recorded."""
    from sofa_top.cli import _open_launch

    args = argparse.Namespace(
        cmd=list(cmd),
        output=str(path),
        name=name,
        interval=0.5,
        stack_rate=1.0,
        no_stacks=True,
    )
    run = _open_launch(args, "record", settings={"optimize": optimize})
    session = run.session
    session.start()
    t_end = time.monotonic() + timeout_s
    warm_at: float | None = None
    reason = "timeout"
    while True:
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
    finisher = threading.Thread(target=run.finish, args=(reason,), daemon=True)
    finisher.start()
    finisher.join(60.0)


def analyze_session(
    path: str | Path, warmup: int, steps: int | None, optimize: dict[str, Any]
) -> RunOutcome:
    """Throughput, compile time, verdict, toggles and loss health of one recorded run."""
    from sofa_top.report import session_summary
    from sofa_top.store import SessionReader

    reader = SessionReader(Path(path))
    try:
        all_steps = reader.steps()
        agent_events = reader.events("agent")
        opt_events = reader.events("optimize")
        logs = reader.events("log")
        meta = reader.meta()
    finally:
        reader.close()
    counts: dict[tuple[str, int], int] = {}
    for s in all_steps:
        counts[(s.source, s.pid)] = counts.get((s.source, s.pid), 0) + 1
    rate = compile_s = None
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
    verdict = None
    try:
        v = session_summary(path).get("verdict")
        verdict = v.get("kind") if isinstance(v, dict) else None
    except Exception:
        verdict = None
    return RunOutcome(
        str(path), rate, unit, compile_s, verdict, applied, not_applied, where, nonfinite, failed
    )


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


def changes_for(result: CompareResult, config: str | None) -> list[str]:
    """The code changes that reproduce what the agent did in ``config``."""
    cr = next((r for r in result.runs if r.config == config), None)
    if cr is None:
        return []
    out: list[str] = []
    where = " ".join(cr.where)
    if "prefetch" in cr.applied:
        if "tf.data" in where:
            out.append(
                "tf.data: `ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)` (same for "
                "interleave) and add `.prefetch(tf.data.AUTOTUNE)` after `.batch(...)`"
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
) -> CompareResult:
    """Run ``cmd`` under each configuration, ``repeats`` times interleaved; compare throughput.

    ``optimize`` maps extra (or overriding) configuration names to ``settings["optimize"]``."""
    if not cmd:
        raise UserError("compare needs a command: sofa-top compare -- python train.py")
    if (steps is None) == (seconds is None):
        raise UserError("compare needs exactly one of steps or seconds")
    table = {**CONFIGS, **(optimize or {})}
    for c in configs:
        if c not in table:
            raise UserError(f"unknown configuration {c!r} (known: {', '.join(table)})")
    base = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="sofa-top-compare-"))
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {c: ConfigResult(c, dict(table[c])) for c in configs}
    say = on_progress or (lambda _m: None)
    for i in range(repeats):
        for c in configs:
            path = base / f"compare-{stamp}-{c}-{i + 1}.sofa"
            say(f"run {i + 1}/{repeats} {c}: {path}")
            try:
                _record_one(
                    list(cmd), table[c], path, f"compare-{c}", steps, seconds, warmup_steps,
                    timeout_s,
                )  # fmt: skip
                out = analyze_session(path, warmup_steps, steps, table[c])
            except UserError:
                raise
            except Exception as e:
                out = RunOutcome(str(path), None, "steps/s", None, None, [], [], [], False, repr(e))
            results[c].outcomes.append(out)
            rate = "-" if out.rate is None else f"{out.rate:.2f} {out.unit}"
            say(f"  {c}: {rate}{'  FAILED: ' + out.failed if out.failed else ''}")
    base_rates = [o.rate for o in results.get("baseline", ConfigResult("", {})).outcomes]
    baseline = _median([r for r in base_rates if r is not None])
    for cr in results.values():
        _summarize(cr, baseline)
    candidates = [
        r
        for r in results.values()
        if r.throughput.get("median") is not None
        and "run-failed" not in r.flags
        and "non-finite-loss" not in r.flags
    ]
    best = max(candidates, key=lambda r: r.throughput["median"]).config if candidates else None
    result = CompareResult(
        list(cmd), repeats, steps, seconds, warmup_steps, list(results.values()), best, []
    )
    result.changes = changes_for(result, best)
    return result


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def render_compare(result: CompareResult, console: Any = None) -> None:
    """A rich table of the comparison and the code changes that reproduce the best one."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"sofa-top compare ({result.repeats} repeat(s), interleaved)")
    for col in ("config", "throughput (median, min-max)", "speedup", "compile s", "verdict"):
        t.add_column(col, justify="right" if col in ("speedup", "compile s") else "left")
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
        name = f"[bold]{r.config}[/bold]" if r.config == result.best else r.config
        sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        t.add_row(name, thr, sp, _fmt(r.compile_s, ".1f"), r.verdict or "-", notes)
    console.print(t)
    if result.best:
        console.print(f"best: [bold]{result.best}[/bold]")
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
        "[--json] -- CMD [ARGS...]",
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
    )
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_compare(result)
    return 0
