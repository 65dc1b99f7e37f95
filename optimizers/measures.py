"""What one optimizer run measured: throughput, toggles, input numbers (typed, no I/O).

``compare`` fills these from a run's session file (``compare.analyze``); the headroom model
(``headroom``) and the parallelism search (``search``) read them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sofa_top.agent.toggles import Toggle
from sofa_top.datamodel.samples import StepSample
from sofa_top.datamodel.verdict_evidence import NO_EVIDENCE, VerdictEvidence

Unit = Literal["samples/s", "steps/s"]
Points = list[tuple[float, float | None, str | None]]  # (ts, value, error), as the store reads


@dataclass(frozen=True)
class InputStats:
    """One run's steady steps, as the headroom model needs them (seconds per step)."""

    compute_s: float  # median(step duration - input wait)
    input_s: float  # median input wait
    step_s: float  # median step duration
    cpu_per_step_s: float | None  # tree CPU-seconds over the measured window / steps
    cores_busy: float | None = None  # the tree's mean cores busy over the window
    others_cores: float | None = None  # cores busy with other processes, on the usable ones


@dataclass(frozen=True)
class DataStream:
    """What one run's loop was fed, as the agent's batch fingerprints counted it."""

    batches: int
    repeats: int  # batches whose fingerprint an earlier batch of the run had
    epoch_batches: tuple[int, ...] = ()  # batches per completed epoch
    first_epoch: tuple[int, int] | None = None  # (batches, repeats) when the first one ended
    prints: tuple[int, ...] = ()  # the batches' prints in the order fed (the first ones)

    @property
    def repeat_fraction(self) -> float:
        """The share of batches that repeated an earlier one, within the first epoch when one
        ended (a later epoch repeats the first by design)."""
        batches, repeats = self.first_epoch or (self.batches, self.repeats)
        return repeats / batches if batches else 0.0


@dataclass(frozen=True)
class RunOutcome:
    """One repeat of one configuration (or one level of the parallelism search)."""

    session: str
    rate: float | None  # per ``unit``
    unit: Unit
    compile_s: float | None
    verdict: str | None  # the run's verdict kind
    applied: tuple[Toggle, ...]
    not_applied: tuple[tuple[Toggle, str], ...]
    where: tuple[str, ...]  # what each applied toggle changed, as the agent said
    nonfinite_loss: bool
    failed: str | None
    parallelism: int | None = None  # what the prefetch toggle applied (optimize events)
    memory: int | None = None  # peak tree PSS in bytes
    rss: int | None = None  # peak of the stored ``tree.rss`` series (sum of RSS)
    batch_size: float | None = None  # median over the measured steps
    input: InputStats | None = None
    evidence: VerdictEvidence = NO_EVIDENCE  # the verdict's
    loss: float | None = None  # the loss the workload logged last (median of its last 5)
    data: DataStream | None = None  # the batches' fingerprints (None: none were seen)
    blocked: tuple[tuple[Toggle, str], ...] = ()  # (toggle, obstacle kind) the agent reported
    serial_source: str | None = None  # a source stage no toggle parallelizes (its name)
    serial_s_per_step: float | None = None  # that stage's own time per step, when measured
    # the run hit its time limit before its measured steps: ``rate`` is over what it did
    partial: bool = False
    # the job's processes that stepped a training loop (spawned trainers, DDP ranks): each
    # runs an intra-op pool of its own on the same cores
    trainers: int = 1

    @classmethod
    def failure(cls, session: str, why: str) -> RunOutcome:
        """A run that produced nothing to measure."""
        return cls(session, None, "steps/s", None, None, (), (), (), False, why)


def median(vals: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(vals) if vals else None


INTERVAL_COVERAGE = 0.90  # the median's interval is the narrowest with this coverage ...
# ... that n runs allow: with 5 or fewer, none reaches it and the interval is (min, max), which
# covers the median with probability 1 - 2^(1-n) (75% for 3 runs, 94% for 5)


def median_interval(vals: Sequence[float]) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``vals``' distribution: order statistics
    (k, n + 1 - k) with the largest k that still covers ``INTERVAL_COVERAGE`` (the sign test);
    None for fewer than two values."""
    n = len(vals)
    if n < 2:
        return None
    s = sorted(vals)
    k = 1
    while k + 1 <= n // 2 and _coverage(n, k + 1) >= INTERVAL_COVERAGE:
        k += 1
    return s[k - 1], s[n - k]


def _coverage(n: int, k: int) -> float:
    """P(X_(k) <= median <= X_(n+1-k)) = 1 - 2 P(Bin(n, 1/2) <= k - 1)."""
    tail = sum(math.comb(n, i) for i in range(k)) / float(2**n)
    return 1.0 - 2.0 * tail


def _cores_busy(points: Points, t0: float, t1: float) -> float | None:
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


def input_stats(
    steady: Sequence[StepSample], cpu_points: Points, core_points: Sequence[Points] = ()
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


@dataclass(frozen=True)
class Throughput:
    """A configuration's throughput over its repeats."""

    median: float | None
    min: float | None
    max: float | None
    unit: Unit

    @classmethod
    def of(cls, outcomes: Sequence[RunOutcome]) -> Throughput:
        """Median and range of the runs that measured a rate (steps/s when units differ)."""
        rates = [o.rate for o in outcomes if o.rate is not None]
        units = {o.unit for o in outcomes if o.rate is not None}
        return cls(
            median=median(rates),
            min=min(rates) if rates else None,
            max=max(rates) if rates else None,
            unit=units.pop() if len(units) == 1 else "steps/s",
        )
