"""What ``compare`` returns: per configuration the runs, their throughput, speedup, flags and
headroom, and for the whole comparison the winner and the code changes that reproduce it.

``CompareResult.to_json`` is ``compare --json`` (schema 3; the JSON schema is
``compare.schema.json`` beside this file)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sofa_top.agent.toggles import OptimizeSpec, Toggle
from sofa_top.optimizers.headroom import Diagnosis, Headroom
from sofa_top.optimizers.measures import RunOutcome, Throughput
from sofa_top.optimizers.search import SearchResult

SCHEMA_VERSION = 3
SCHEMA_FILE = Path(__file__).with_name("compare.schema.json")
Flag = Literal[
    "toggle-not-applied",
    "slower",  # clearly slower than the baseline, or too slow to finish its measured steps
    "non-finite-loss",
    "run-failed",  # a run failed (the workload's error, no steps at all); never for slowness
    "numerics-changing",  # a toggle that changes the results' last bits applied (bf16)
    "loss-differs",  # ... and the loss it logged is off the baseline's (see summary.LOSS_TOLERANCE)
    "data-changed",  # the run's loop was fed another data stream than the baseline's
]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Whether the order of the configurations is measured rather than noise, and why."""

    clear: bool
    why: str
    baseline_spread: float | None = None  # the baseline's fastest run over its slowest

    def to_json(self) -> dict[str, Any]:
        """``ranking`` in ``compare --json``."""
        spread = None if self.baseline_spread is None else round(self.baseline_spread, 3)
        return {"clear": self.clear, "why": self.why, "baseline_spread": spread}


@dataclass
class ConfigResult:
    """One configuration over its repeats (``outcomes``, in run order)."""

    config: str
    optimize: OptimizeSpec
    outcomes: list[RunOutcome] = field(default_factory=list)
    applied: list[Toggle] = field(default_factory=list)
    not_applied: list[tuple[Toggle, str]] = field(default_factory=list)
    throughput: Throughput = field(default_factory=lambda: Throughput(None, None, None, "steps/s"))
    speedup: float | None = None
    verdict: str | None = None
    compile_s: float | None = None
    flags: list[Flag] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    parallelism: int | None = None
    headroom: Headroom = field(default_factory=lambda: Headroom.unknown("steps/s"))
    loss: float | None = None  # median over the repeats of the loss the workload logged last
    data_change: str | None = None  # how the data stream differed from the baseline's
    advice: list[str] = field(default_factory=list)  # code changes that let a toggle apply
    data_compared_batches: int | None = None  # batches its stream was compared over
    interval: tuple[float, float] | None = None  # the median throughput's interval
    # against the baseline's interval: clearly faster, clearly slower, or not clear at this
    # noise; None for the baseline and for what cannot be compared (nothing applied, failed)
    effect: Literal["faster", "slower", "unclear"] | None = None
    partial: bool = False  # a run stopped before its measured steps: its throughput is partial

    def to_json(self) -> dict[str, Any]:
        """One entry of ``runs`` in ``compare --json``."""
        return {
            "config": self.config,
            "optimize": self.optimize.to_json(),
            "applied": list(self.applied),
            "not_applied": [{"toggle": t, "reason": why} for t, why in self.not_applied],
            "throughput": asdict(self.throughput),
            "interval": None if self.interval is None else list(self.interval),
            "effect": self.effect,
            "partial": self.partial,
            "speedup": self.speedup,
            "verdict": self.verdict,
            "compile_s": self.compile_s,
            "flags": list(self.flags),
            "where": list(self.where),
            "errors": list(self.errors),
            "sessions": list(self.sessions),
            "parallelism": self.parallelism,
            "headroom": asdict(self.headroom),
            "loss": self.loss,
            "data_change": self.data_change,
            "data_compared_batches": self.data_compared_batches,
            "advice": list(self.advice),
        }


@dataclass
class CompareResult:
    """The whole comparison."""

    cmd: list[str]
    repeats: int
    steps: int | None
    seconds: float | None
    warmup_steps: int
    runs: list[ConfigResult]
    best: str | None
    changes: list[str]
    diagnosis: Diagnosis | None = None
    search: SearchResult | None = None
    rounds: int = 0  # rounds of repeats run (more than ``repeats`` while the noise hid a result)
    # why no configuration is named best ("no clear difference at this noise", with the
    # spread); None when one is
    best_note: str | None = None
    stopped: str | None = None  # why the comparison stopped early (the baseline failed)
    # whether the noise lets the configurations be ranked (``ranking.ranking_of``); None
    # before the comparison is summarized
    ranking: Ranking | None = None

    @property
    def all_failed(self) -> bool:
        """Whether every configuration's every run failed (nothing was measured)."""
        outcomes = [o for r in self.runs for o in r.outcomes]
        return bool(outcomes) and all(o.failed for o in outcomes)

    def run(self, config: str | None) -> ConfigResult | None:
        """The result of ``config`` (None when it was not run)."""
        return next((r for r in self.runs if r.config == config), None)

    def to_json(self) -> dict[str, Any]:
        """``compare --json``."""
        return {
            "schema": SCHEMA_VERSION,
            "cmd": self.cmd,
            "repeats": self.repeats,
            "steps": self.steps,
            "seconds": self.seconds,
            "warmup_steps": self.warmup_steps,
            "rounds": self.rounds,
            "runs": [r.to_json() for r in self.runs],
            "best": self.best,
            "best_note": self.best_note,
            "changes": self.changes,
            "diagnosis": None if self.diagnosis is None else self.diagnosis.to_json(),
            "search": {} if self.search is None else self.search.to_json(),
            "stopped": self.stopped,
            "ranking": None if self.ranking is None else self.ranking.to_json(),
        }
