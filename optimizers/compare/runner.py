"""``run_compare``: re-run a command under optimizer configurations and compare throughput.

Each configuration (``baseline``, one per toggle, ``all``) is an ``OptimizeSpec`` the in-process
agent applies. Every run is a real session file (launch mode, headless, no stack sampling); it is
stopped once ``warmup_steps`` + ``steps`` steps are recorded (or ``seconds`` after the warm-up
steps). Repeats are interleaved (A B C A B C ...) so that slow drift of the machine cancels out.
Throughput is measured on the agent's steps after the warm-up ones: steps/s, or samples/s when
the batch size is known.

Input causes. The first baseline run is diagnosed before the others run: its verdict's
``input_cause`` (cpu / latency / mixed) picks the prefetch parallelism (``search``). CPU-bound
input stays at the core count. Input that waits (latency, mixed) is measured at cores x 1, 2, 4,
8, 16 (one run each, prefetch configuration) until a level is less than 10% better than the best
so far, the tree's memory (PSS: forked workers share pages that a sum of RSS counts once per
worker) passes 2x the baseline's, or the next level would pass half the RAM. ``parallelism``
skips the search.

Noise. A shared machine makes runs of one configuration differ by 10-50%: after ``repeats``
rounds, each configuration's median gets an interval (``measures.median_interval``; a
difference is called with ``summary.MIN_RUNS_CLEAR`` runs a side at least) and rounds go on,
for the baseline and the configurations whose interval still overlaps the baseline's, until
none does, ``max_repeats`` rounds were run or the time ``budget_s`` allows runs no more
(default: as long again as the first rounds took). A configuration is named best only when it
is clearly faster (``summary.best_config``); one where no toggle applied is run once and not
timed as if it had.

Headroom (``headroom``), per configuration, from the baseline's measured steps: compute-only
rate 1 / median(step - input wait); CPU bound free cores / CPU-seconds per step; for
latency/mixed causes, the latency bound P / input time per step. The headroom is the smallest of
them, in the run's unit; ``fraction_reached`` is the run's median throughput over it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sofa_top.agent.toggles import THREADS, OptimizeSpec
from sofa_top.collectors.discovery import JobCopy
from sofa_top.datamodel.errors import UserError
from sofa_top.optimizers.compare.analyze import analyze_session
from sofa_top.optimizers.compare.configs import (
    AUTO_THREADS,
    auto_threads,
    check_configs,
    config_table,
    default_configs,
)
from sofa_top.optimizers.compare.progress import (
    CompareEvent,
    Diagnosed,
    OnProgress,
    RunFinished,
    RunStarted,
    SearchFinished,
    SearchLevelFinished,
    SearchLevelStarted,
)
from sofa_top.optimizers.compare.ranking import ranking_of
from sofa_top.optimizers.compare.record import SessionCut, record_one
from sofa_top.optimizers.compare.results import CompareResult, ConfigResult
from sofa_top.optimizers.compare.summary import (
    best_config,
    changes_for,
    effect,
    no_best_note,
    nothing_applied,
    rates,
    summarize,
)
from sofa_top.optimizers.headroom import diagnose
from sofa_top.optimizers.measures import RunOutcome, median
from sofa_top.optimizers.probes import ram_total, usable_cores
from sofa_top.optimizers.search import SEARCH_LEVELS, SearchResult, given, search_parallelism

# Batches each input producer holds ready before the loop asks: the agent's DataLoader
# prefetch_factor (sofa_top.agent.optimize), about what a tf.data map + prefetch keeps in flight.
BUFFERED_PER_PRODUCER = 4
MORE_ROUNDS = 4  # rounds past ``repeats`` while the noise hides a result (default max_repeats)


def run_warmup(warmup_steps: int, spec: OptimizeSpec, cores: int) -> int:
    """The steps to exclude from a run: ``warmup_steps``, but at least twice the batches its
    input producers buffer. Until that buffer is drained a run measures how fast the loop
    empties it, not its input stage (16 DataLoader workers hold 64 batches: 20 measured steps
    came out at 1.3-1.8x what 16 producers can deliver, and every search level looked better).
    Twice: the producers refill it while the loop drains it, which takes B c / (c - p) steps
    for a buffer of B, a loop that could take c steps/s and producers that make p; that is
    under 2 B wherever the loop is at least twice as fast as its input (input-bound)."""
    producers = spec.parallelism or (cores if spec.prefetch is not None else 0)
    return max(warmup_steps, 2 * BUFFERED_PER_PRODUCER * producers)


@dataclass(frozen=True)
class _Plan:
    """How each run is recorded, shared by every configuration."""

    cmd: tuple[str, ...]
    steps: int | None
    seconds: float | None
    warmup: int
    timeout_s: float
    out_dir: Path
    stamp: str
    like: JobCopy | None = None  # compare --like PID: that job's cwd and environment

    def record(self, name: str, spec: OptimizeSpec, path: Path) -> RunOutcome:
        """One run, recorded and analyzed; a failure to run is an outcome, not an error."""
        warmup = run_warmup(self.warmup, spec, usable_cores())
        try:
            memory = record_one(
                self.cmd, spec, path, f"compare-{name}", self.steps, self.seconds, warmup,
                self.timeout_s, self.like, f"compare-{self.stamp}-{os.getpid()}",
            )  # fmt: skip
            return analyze_session(path, warmup, self.steps, spec, memory)
        except UserError:
            raise
        except SessionCut as e:  # its file lacks the end: judging it again would be as slow
            return RunOutcome.failure(str(path), str(e))
        except Exception as e:
            return RunOutcome.failure(str(path), repr(e))


def _check(cmd: Sequence[str], steps: int | None, seconds: float | None, p: int | None) -> None:
    if not cmd:
        raise UserError("compare needs a command: sofa-top compare -- python train.py")
    if (steps is None) == (seconds is None):
        raise UserError("compare needs exactly one of steps or seconds")
    if p is not None and p < 1:
        raise UserError("--parallelism must be at least 1")


def run_compare(
    cmd: Sequence[str],
    configs: Sequence[str] = default_configs(),
    repeats: int = 3,
    steps: int | None = 50,
    seconds: float | None = None,
    warmup_steps: int = 5,
    on_progress: OnProgress | None = None,
    out_dir: str | Path | None = None,
    timeout_s: float = 600.0,
    optimize: Mapping[str, OptimizeSpec] | None = None,
    parallelism: int | None = None,
    search: bool = True,
    search_levels: int = SEARCH_LEVELS,
    like: JobCopy | None = None,
    max_repeats: int | None = None,
    budget_s: float | None = None,
) -> CompareResult:
    """Run ``cmd`` under each configuration, ``repeats`` times interleaved (more, up to
    ``max_repeats`` rounds within ``budget_s`` seconds, while the noise hides whether one is
    faster); compare throughput.

    ``optimize`` maps extra (or overriding) configuration names to their specs. The first
    baseline run is diagnosed before the others: prefetch configurations without a parallelism
    of their own get the one the search picks (``search``), or ``parallelism`` when given; the
    search tries at most ``search_levels`` levels. ``like``: each run is a copy of that running
    job (its working directory and environment; ``cmd`` is its command line)."""
    _check(cmd, steps, seconds, parallelism)
    table = config_table(optimize)
    check_configs(configs, table)
    base = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="sofa-top-compare-"))
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    plan = _Plan(tuple(cmd), steps, seconds, warmup_steps, timeout_s, base, stamp, like)
    say: OnProgress = on_progress or _quiet
    results = {c: ConfigResult(c, table[c]) for c in configs}

    def run(c: str, i: int) -> None:
        path = base / f"compare-{plan.stamp}-{c}-{i + 1}.sofa"
        say(RunStarted(c, i + 1, max(repeats, i + 1), str(path)))  # past repeats: more rounds
        out = plan.record(c, results[c].optimize, path)
        results[c].outcomes.append(out)
        say(RunFinished(c, i + 1, out))

    searched = [c for c in configs if table[c].wants_search()]
    threaded = [c for c in configs if table[c].threads == AUTO_THREADS]
    found: SearchResult | None = None
    first_done = "baseline" in results
    if first_done:
        # the baseline first: a workload that fails as it is fails every configuration, and
        # re-running it under toggles only hides its own error among theirs
        run("baseline", 0)
        failure = results["baseline"].outcomes[0].failed
        if failure is not None:
            result = _result(plan, 1, {"baseline": results["baseline"]}, None, repeats)
            result.stopped = f"the baseline failed: {failure}"
            return result
    if searched and parallelism is not None:
        found = given(parallelism)
    elif searched and search and first_done:
        found = _search(plan, results["baseline"], table[searched[0]], say, search_levels)
    if found is not None and found.chosen is not None:
        for c in searched:
            results[c].optimize = results[c].optimize.with_parallelism(found.chosen)
    if threaded:
        base_diag = diagnose(results["baseline"].outcomes, usable_cores()) if first_done else None
        base_outs = results["baseline"].outcomes if first_done else []
        trainers = max((o.trainers for o in base_outs), default=1)
        others = None if base_diag is None else base_diag.others_cores
        n = auto_threads(usable_cores(), others, trainers)
        for c in threaded:
            results[c].optimize = results[c].optimize.with_(THREADS, n)
    started = time.monotonic()
    for i in range(repeats):
        for c in configs:
            if i == 0 and c == "baseline" and first_done:
                continue
            if i > 0 and nothing_applied(results[c]):
                continue  # it would run the baseline again
            run(c, i)
    spent = time.monotonic() - started
    budget = spent if budget_s is None else budget_s
    rounds = _more_rounds(
        results, run, repeats, max_repeats or repeats + MORE_ROUNDS, budget, spent / repeats
    )
    return _result(plan, rounds, results, found, repeats)


def _unclear(results: dict[str, ConfigResult]) -> list[str]:
    """The configurations whose median interval still overlaps the baseline's."""
    base = results.get("baseline")
    if base is None:
        return []
    out = []
    for c, cr in results.items():
        if c == "baseline" or nothing_applied(cr) or any(o.failed for o in cr.outcomes):
            continue
        if effect(rates(cr), rates(base)) == "unclear":
            out.append(c)
    return out


def _more_rounds(
    results: dict[str, ConfigResult],
    run: Callable[[str, int], None],
    done: int,
    most: int,
    budget_s: float,
    round_s: float,
) -> int:
    """Rounds of the baseline and the unclear configurations, until none is unclear, ``most``
    rounds ran, or the next would not fit in ``budget_s``; the rounds run in all."""
    started = time.monotonic()
    rounds = done
    n = max(1, len(results))
    while rounds < most:
        unclear = _unclear(results)
        if not unclear:
            break
        # a round of only these runs takes about their share of a full round
        need = round_s * (len(unclear) + 1) / n
        if time.monotonic() - started + need > budget_s:
            break
        for c in ("baseline", *unclear):
            run(c, rounds)
        rounds += 1
    return rounds


def _search(
    plan: _Plan, baseline: ConfigResult, prefetch: OptimizeSpec, say: OnProgress, levels: int
) -> SearchResult | None:
    """Diagnose the first baseline run and, for input that waits, search the parallelism."""
    diag = diagnose(baseline.outcomes, usable_cores())
    say(Diagnosed(diag))
    if diag is None:
        return None

    def measure(p: int) -> RunOutcome:
        path = plan.out_dir / f"compare-{plan.stamp}-search-p{p}.sofa"
        say(SearchLevelStarted(p, str(path)))
        out = plan.record(f"search-p{p}", prefetch.with_parallelism(p), path)
        say(SearchLevelFinished(p, out))
        return out

    found = search_parallelism(diag, measure, ram_total(), levels)
    say(SearchFinished(found))
    return found


def _result(
    plan: _Plan,
    rounds: int,
    results: dict[str, ConfigResult],
    found: SearchResult | None,
    repeats: int,
) -> CompareResult:
    base_runs = results["baseline"].outcomes if "baseline" in results else []
    baseline = median([o.rate for o in base_runs if o.rate is not None])
    baseline_loss = median([o.loss for o in base_runs if o.loss is not None])
    diag = diagnose(base_runs, usable_cores()) if "baseline" in results else None
    base_data = next((o.data for o in base_runs if o.data is not None), None)
    base_rates = [o.rate for o in base_runs if o.rate is not None]
    for cr in results.values():
        summarize(cr, baseline, diag, baseline_loss, base_data, base_rates)
    runs = list(results.values())
    best = best_config(runs)
    result = CompareResult(
        list(plan.cmd), repeats, plan.steps, plan.seconds, plan.warmup, runs, best,
        [], diagnosis=diag, search=found, rounds=rounds,
        best_note=None if best is not None else no_best_note(runs),
    )  # fmt: skip
    result.changes = changes_for(result, result.best)
    result.ranking = ranking_of(runs, diag)
    return result


def _quiet(_event: CompareEvent) -> None:
    pass
