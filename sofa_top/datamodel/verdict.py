"""What a verdict is: its kind, the numbers behind it and the code changes it recommends.

How a verdict is reached lives in ``sofa_top.analysis.verdicts``; which change fixes which
bottleneck in ``sofa_top.optimizers.advice``. This module only holds the shapes they share with
the hub, the store (a verdict marker is ``Verdict.as_json`` in an event's data), replay, the
reports and the TUI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from sofa_top.agent.toggles import Toggle, toggle_name, toggle_of
from sofa_top.datamodel.literals import one_of

VerdictKind = Literal[
    "input-bound",
    "compute-bound",
    "python-overhead",
    "gpu-underutilized",
    "memory-pressure",
    "cpu-oversubscribed",
    "idle",
    "unknown",
    # across the ranks of a distributed job (``sofa_top.analysis.ranks``); never a process's own
    "straggler",
    "balanced",
]
VERDICT_KINDS: tuple[VerdictKind, ...] = get_args(VerdictKind)
Severity = Literal["high", "moderate"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# why the input stage is slow: it computes (``cpu``), it waits on storage/network/locks
# (``latency``), other processes take the cores it needs (``contention``), or a mix
InputCauseKind = Literal["cpu", "latency", "mixed", "contention"]
INPUT_CAUSES: tuple[InputCauseKind, ...] = get_args(InputCauseKind)
RANK_VERDICT_KINDS: tuple[VerdictKind, ...] = ("straggler", "balanced")
# Why a GPU idles (``gpu-underutilized``'s ``evidence.cause``): kernel launches from Python,
# host-device copies, other host work, or the allocator near the card's memory
GpuCause = Literal["launch", "copy", "cpu", "memory-pressure"]


# How advice that rests on no measurement ends: " (not measured here: ...)". A comparison that
# measures it replaces that note with what it measured (``analysis.measured``).
UNMEASURED = " (not measured here: "


def unmeasured(why: str = "") -> str:
    """The note for advice that rests on no measurement (``why``: what its effect depends on)."""
    more = f"; {why}" if why else ""
    return f"{UNMEASURED}Re-run & compare in the o panel, or `sofa-top compare`, measures it{more})"


@dataclass(frozen=True, slots=True)
class Recommendation:
    text: str  # a concrete code change
    toggle: Toggle | None = None  # the optimizer toggle that tries it


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    confidence: float  # 0..1
    headline: str  # one line a person reads first
    evidence: Mapping[str, object] = field(default_factory=dict)
    recommendations: tuple[Recommendation, ...] = ()
    severity: Severity | None = None  # "high" / "moderate" where the kind has degrees

    def as_json(self) -> dict[str, object]:
        """The ``verdict`` object of ``record --json`` (and of a stored verdict marker)."""
        return {
            "kind": self.kind,
            "confidence": round(self.confidence, 2),
            "headline": self.headline,
            "severity": self.severity,
            "evidence": dict(self.evidence),
            "recommendations": [r.text for r in self.recommendations],
            # the optimizer toggle that tries each recommendation (null: none does)
            "toggles": [r.toggle and toggle_name(r.toggle) for r in self.recommendations],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object], headline: str = "") -> Verdict:
        """The inverse of ``as_json`` (for markers read back from a session file); a field
        that is missing or of the wrong type takes its neutral value."""
        recs = d.get("recommendations")
        toggles = d.get("toggles")
        evidence = d.get("evidence")
        conf = d.get("confidence")
        return cls(
            kind=verdict_kind(d.get("kind")),
            confidence=float(conf) if isinstance(conf, int | float) else 0.0,
            headline=str(d.get("headline") or headline),
            evidence=dict(evidence) if isinstance(evidence, dict) else {},
            recommendations=tuple(
                Recommendation(
                    str(t),
                    toggle_of(toggles[i])
                    if isinstance(toggles, list)
                    and i < len(toggles)
                    and isinstance(toggles[i], str)
                    else None,
                )
                for i, t in enumerate(recs)
            )
            if isinstance(recs, list)
            else (),
            # a session of an older version wrote "" for none
            severity=one_of(d.get("severity"), SEVERITIES),
        )


def verdict_kind(value: object) -> VerdictKind:
    """``value`` as a verdict kind; anything this version does not know is ``unknown``."""
    return one_of(value, VERDICT_KINDS) or "unknown"


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Where the input producers' time went, as the scheduler accounted it (fractions that add
    up to 1): on a CPU, runnable but waiting for one, and asleep or blocked (storage, the
    network, a lock)."""

    on_cpu: float
    cpu_wait: float
    blocked: float

    def as_json(self) -> dict[str, float]:
        """``verdict.evidence.input_time_split``."""
        return {
            "on_cpu": round(self.on_cpu, 3),
            "cpu_wait": round(self.cpu_wait, 3),
            "blocked": round(self.blocked, 3),
        }


InputCauseSource = Literal["schedstat", "agent", "tree"]

NEIGHBOURS_BUSY = 0.5  # cores other processes must keep busy for their load to count


@dataclass(frozen=True, slots=True)
class InputCause:
    """Why the input stage is slow (``InputCauseKind``), with its numbers."""

    cause: InputCauseKind
    cpu_cores: float  # cores busy producing input while the loop waits
    usable_cores: int  # min(cores, the stage's parallelism)
    parallelism: int | None  # the input stage's parallelism, when known
    # "schedstat": the producers' own threads, as the scheduler accounted them; without it
    # "agent" (the process's CPU during each wait) or "tree" (the tree's CPU, no agent)
    source: InputCauseSource
    split: TimeSplit | None = None  # the producers' time (schedstat only)
    producers: str = ""  # whose time: "the loop's thread", "4 DataLoader workers", ...
    # other processes keep this many cores busy (measured; None: not known)
    others_cores: float | None = None
    contended: bool = False  # the producers notably wait for cores other processes hold

    @property
    def utilization(self) -> float:
        """The share of its usable cores the input stage kept busy."""
        return min(1.0, self.cpu_cores / max(1, self.usable_cores))

    @property
    def shared(self) -> bool:
        """Other processes keep ``NEIGHBOURS_BUSY`` cores or more busy: more producers get
        only the share the scheduler gives them."""
        return self.others_cores is not None and self.others_cores >= NEIGHBOURS_BUSY


MeasuredEffect = Literal["faster", "slower", "unclear", "not-applied"]


@dataclass(frozen=True, slots=True)
class Measured:
    """What a comparison measured for one toggle against the baseline (``compare``, or the
    optimizer panel): the verdict then carries it and withdraws advice it contradicts."""

    toggle: Toggle
    effect: MeasuredEffect
    speedup: float | None  # median over the baseline's median
    low: float | None = None  # the speedup's interval (run spread over the baseline's)
    high: float | None = None
    parallelism: int | None = None  # the prefetch parallelism it ran at
    threads: int | None = None  # the thread count it ran at
    reason: str = ""  # not-applied: why
    change: str = ""  # the code change that keeps what it measured (compare's ``changes``)

    @property
    def name(self) -> str:
        """The toggle as people read it (``depth-first``)."""
        return toggle_name(self.toggle)

    @property
    def text(self) -> str:
        """``measured: prefetch x3.63 at parallelism 16`` (how the verdict quotes it)."""
        if self.effect == "not-applied" or self.speedup is None:
            return f"measured: {self.name} did not apply ({self.reason or 'nothing to change'})"
        at = ""
        if self.parallelism is not None:
            at = f" at parallelism {self.parallelism}"
        elif self.threads is not None:
            at = f" at {self.threads} thread{'s' if self.threads != 1 else ''}"
        spread = ""
        if self.low is not None and self.high is not None:
            spread = f" ({self.low:.2f}-{self.high:.2f})"
        word = {"faster": "", "slower": ": slower", "unclear": ": no clear difference"}.get(
            self.effect, ""
        )
        return f"measured: {self.name} x{self.speedup:.2f}{at}{spread}{word}"

    def as_json(self) -> dict[str, object]:
        """A ``measured`` event's data (and ``verdict.evidence.measured``' items)."""
        return {
            "toggle": self.name,
            "effect": self.effect,
            "speedup": self.speedup,
            "low": self.low,
            "high": self.high,
            "parallelism": self.parallelism,
            "threads": self.threads,
            "reason": self.reason,
            "change": self.change,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Measured | None:
        """The inverse of ``as_json``; None when ``d`` is not one."""
        t = d.get("toggle")
        toggle = toggle_of(t) if isinstance(t, str) else None
        effect = one_of(d.get("effect"), get_args(MeasuredEffect))
        if toggle is None or effect is None:
            return None

        def num(key: str) -> float | None:
            v = d.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        def count(key: str) -> int | None:
            v = d.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

        return cls(
            toggle, effect, num("speedup"), num("low"), num("high"), count("parallelism"),
            count("threads"), str(d.get("reason") or ""), str(d.get("change") or ""),
        )  # fmt: skip
