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

from sofa_top.model.literals import one_of

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
Severity = Literal["", "high", "moderate"]
# The optimizer toggle a recommendation can be tried with (compare's configuration names).
ToggleName = Literal[
    "prefetch", "xla", "depth-first", "threads", "pin-memory", "bf16", "compile-mode"
]  # fmt: skip
InputCauseKind = Literal["cpu", "latency", "mixed"]
RANK_VERDICT_KINDS: tuple[VerdictKind, ...] = ("straggler", "balanced")
# Why a GPU idles (``gpu-underutilized``'s ``evidence.cause``): kernel launches from Python,
# host-device copies, other host work, or the allocator near the card's memory
GpuCause = Literal["launch", "copy", "cpu", "memory-pressure"]


@dataclass(frozen=True, slots=True)
class Recommendation:
    text: str  # a concrete code change
    toggle: ToggleName | None = None  # the optimizer toggle that tries it


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    confidence: float  # 0..1
    headline: str  # one line a person reads first
    evidence: Mapping[str, object] = field(default_factory=dict)
    recommendations: tuple[Recommendation, ...] = ()
    severity: Severity = ""  # "high" / "moderate" for input-bound

    def as_json(self) -> dict[str, object]:
        """The ``verdict`` object of ``record --json`` (and of a stored verdict marker)."""
        return {
            "kind": self.kind,
            "confidence": round(self.confidence, 2),
            "headline": self.headline,
            "severity": self.severity,
            "evidence": dict(self.evidence),
            "recommendations": [r.text for r in self.recommendations],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object], headline: str = "") -> Verdict:
        """The inverse of ``as_json`` (for markers read back from a session file); a field
        that is missing or of the wrong type takes its neutral value."""
        recs = d.get("recommendations")
        evidence = d.get("evidence")
        conf = d.get("confidence")
        sev = d.get("severity")
        severity: Severity = "high" if sev == "high" else "moderate" if sev == "moderate" else ""
        return cls(
            kind=verdict_kind(d.get("kind")),
            confidence=float(conf) if isinstance(conf, int | float) else 0.0,
            headline=str(d.get("headline") or headline),
            evidence=dict(evidence) if isinstance(evidence, dict) else {},
            recommendations=tuple(Recommendation(str(t)) for t in recs)
            if isinstance(recs, list)
            else (),
            severity=severity,
        )


def verdict_kind(value: object) -> VerdictKind:
    """``value`` as a verdict kind; anything this version does not know is ``unknown``."""
    return one_of(value, VERDICT_KINDS) or "unknown"


@dataclass(frozen=True, slots=True)
class InputCause:
    """Why the input stage is slow: ``cpu``, ``latency`` or ``mixed``, with its numbers."""

    cause: InputCauseKind
    cpu_cores: float  # cores busy producing input while the loop waits
    usable_cores: int  # min(cores, the stage's parallelism)
    parallelism: int | None  # the input stage's parallelism, when known
    source: Literal[
        "agent", "tree"
    ]  # "agent" (CPU during each wait) or "tree" (the tree's CPU, no agent)
    # what of usable_cores the stage could get next to other processes' load (see input_cause)
    available_cores: float | None = None

    @property
    def utilization(self) -> float:
        """The share of the cores it could get (its usable ones, less what other processes
        took, at least an equal share next to them) that the input stage kept busy."""
        avail = self.available_cores if self.available_cores else max(1, self.usable_cores)
        return min(1.0, self.cpu_cores / avail)
