"""The measured parallelism search for input that waits: how many producers (tf.data parallel
calls and pool threads, DataLoader workers) the prefetch toggle should use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sofa_top.agent.toggles import PREFETCH
from sofa_top.optimizers.headroom import Diagnosis, InputCauseName
from sofa_top.optimizers.measures import RunOutcome, Unit

SEARCH_LEVELS = 5  # parallelism levels tried at most: cores x 1, 2, 4, 8, 16
SEARCH_GAIN = 1.10  # a level must beat the best so far by 10% for the search to go on
SEARCH_MEMORY_GROWTH = 2.0  # stop when the tree's memory passes this multiple of baseline's
SEARCH_MEMORY_SHARE = 0.5  # ... or the next level would pass this share of the machine's RAM


@dataclass(frozen=True)
class SearchLevel:
    """One parallelism tried."""

    parallelism: int
    throughput: float | None
    unit: Unit
    memory: int | None  # peak tree PSS
    rss: int | None
    applied: bool  # the prefetch toggle applied
    failed: str | None


@dataclass(frozen=True)
class SearchResult:
    """The ``search`` object of ``compare --json``."""

    cause: InputCauseName | None
    chosen: int | None  # the parallelism the prefetch configurations get (None: defaults)
    stop: str  # why the search stopped (or why there was none)
    levels: tuple[SearchLevel, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """As ``compare --json`` writes it."""
        return {
            "cause": self.cause,
            "levels": [asdict(lv) for lv in self.levels],
            "chosen": self.chosen,
            "stop": self.stop,
        }


def given(parallelism: int) -> SearchResult:
    """No search: ``--parallelism`` said it."""
    return SearchResult(None, parallelism, "given")


def search_parallelism(
    diag: Diagnosis,
    measure: Callable[[int], RunOutcome],
    ram: int | None = None,
    levels_max: int = SEARCH_LEVELS,
) -> SearchResult:
    """Pick the prefetch parallelism from the baseline's diagnosis.

    cpu-bound input stays at the core count (more producers only share the same cores). For
    input that waits (latency, mixed; contention too: under fair scheduling more producers get
    a larger share of the cores other processes hold), ``measure`` runs the prefetch
    configuration at cores x 1, 2, 4, ... and the search stops when a level is less than
    ``SEARCH_GAIN`` better than the best so far, when the tree's memory passes
    ``SEARCH_MEMORY_GROWTH`` x the baseline's, or when the next level's projected memory would
    pass ``SEARCH_MEMORY_SHARE`` of ``ram``."""
    if diag.cause == "cpu":
        return SearchResult(
            diag.cause, diag.cores, "cpu-bound input: parallelism stays at the core count"
        )
    if diag.cause not in ("latency", "mixed", "contention"):
        return SearchResult(
            diag.cause, None, "baseline not input-bound: no search (prefetch defaults)"
        )
    levels: list[SearchLevel] = []
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
        applied = PREFETCH in o.applied
        levels.append(SearchLevel(p, o.rate, o.unit, o.memory, o.rss, applied, o.failed))
        why = _stop(diag, p, o, applied, best_p, best_rate)
        if why is not None:
            stop = why
            break
        if o.memory is not None:
            last = (p, o.memory)
        best_p, best_rate = p, o.rate or 0.0
    return SearchResult(diag.cause, best_p, stop, tuple(levels))


def _stop(
    diag: Diagnosis, p: int, o: RunOutcome, applied: bool, best_p: int | None, best_rate: float
) -> str | None:
    """Why the search ends at level ``p`` (None: it goes on)."""
    if o.failed or o.rate is None or o.nonfinite_loss:
        return f"parallelism {p}: " + (o.failed or "no throughput / non-finite loss")
    if not applied:
        return "the prefetch toggle did not apply: parallelism changes nothing"
    if diag.memory and o.memory and o.memory > SEARCH_MEMORY_GROWTH * diag.memory:
        return f"parallelism {p}: memory {o.memory / diag.memory:.1f}x the baseline's"
    if best_p is not None and o.rate < SEARCH_GAIN * best_rate:
        return f"parallelism {p}: less than {SEARCH_GAIN - 1:.0%} better than {best_p}"
    return None
