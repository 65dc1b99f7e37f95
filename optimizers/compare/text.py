"""Plain-text pieces of a comparison that the CLI and the TUI both show."""

from __future__ import annotations

import math

from sofa_top.optimizers.compare.progress import (
    CompareEvent,
    Diagnosed,
    RunFinished,
    RunStarted,
    SearchFinished,
    SearchLevelFinished,
    SearchLevelStarted,
)
from sofa_top.optimizers.compare.ranking import NOISY_SPREAD
from sofa_top.optimizers.compare.results import CompareResult, ConfigResult
from sofa_top.optimizers.measures import RunOutcome


def fmt(v: float | None, spec: str = ".2f") -> str:
    """A number, or ``-`` when there is none."""
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def headroom_cell(cr: ConfigResult) -> str:
    """``at 96% of what 2 cores allow (1234.0 samples/s)``, or ``-``."""
    h = cr.headroom
    if not h.text:
        return "-"
    return f"{h.text} ({fmt(h.throughput, '.1f')} {h.unit})"


def diagnosis_lines(result: CompareResult) -> list[str]:
    """The baseline's input cause and the parallelism search, in a few plain lines."""
    d = result.diagnosis
    lines: list[str] = []
    if d is not None and d.cause:
        parts = [f"input cause: {d.cause}"]
        if d.input_cpu_cores is not None:
            parts.append(f"{d.input_cpu_cores:.2f} cores busy producing input")
        # one number per fact: the wait a step spends (part of the step's time), and how long
        # one producer takes per input item only where that is another number (p0 > 1)
        if d.wait_s is not None:
            parts.append(f"{d.wait_s * 1e3:.1f} ms input wait / step")
        if d.compute_s is not None:
            parts.append(f"{d.compute_s * 1e3:.1f} ms compute / step")
        if d.input_s is not None and d.input_parallelism and d.input_parallelism > 1:
            parts.append(
                f"{d.input_s * 1e3:.1f} ms per input item ({d.input_parallelism} producers)"
            )
        parts.append(f"{d.cores} cores")
        lines.append(", ".join(parts))
    s = result.search
    if s is None:
        return lines
    if s.levels:
        tried = ", ".join(f"{lv.parallelism}: {fmt(lv.throughput, '.1f')}" for lv in s.levels)
        lines.append(f"parallelism search ({s.levels[0].unit}): {tried}")
    lines.append(f"parallelism: {s.chosen or 'default'} ({s.stop})")
    return lines


def _rate(out: RunOutcome) -> str:
    rate = "-" if out.rate is None else f"{out.rate:.2f} {out.unit}"
    return rate + (f"  FAILED: {out.failed}" if out.failed else "")


def progress_line(event: CompareEvent) -> str:
    """One line of progress for a terminal or a log."""
    if isinstance(event, RunStarted):
        return f"run {event.repeat}/{event.repeats} {event.config}: {event.session}"
    if isinstance(event, RunFinished):
        return f"  {event.config}: {_rate(event.outcome)}"
    if isinstance(event, Diagnosed):
        cause = event.diagnosis.cause if event.diagnosis is not None else None
        return f"diagnosis: input cause {cause or '-'}"
    if isinstance(event, SearchLevelStarted):
        return f"search parallelism {event.parallelism}: {event.session}"
    if isinstance(event, SearchLevelFinished):
        return f"  search p={event.parallelism}: {_rate(event.outcome)}"
    assert isinstance(event, SearchFinished)
    return f"search: parallelism {event.search.chosen} ({event.search.stop})"


def ranking_line(result: CompareResult) -> str | None:
    """``ranking: not clear: ...`` when the noise is too wide to rank the configurations (or a
    clear ranking measured through wide noise); None when it is plainly clear."""
    r = result.ranking
    if r is None:
        return None
    if not r.clear:
        return f"ranking: not clear: {r.why}"
    noisy = r.baseline_spread is not None and r.baseline_spread > NOISY_SPREAD
    return f"ranking: clear: {r.why}" if noisy else None
