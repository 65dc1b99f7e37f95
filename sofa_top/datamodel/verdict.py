"""What a verdict is: its kind, the numbers behind it and the code changes it recommends.

How a verdict is reached lives in ``sofa_top.analysis.verdicts``; which change fixes which
bottleneck in ``sofa_top.optimizers.advice``. This module only holds the shapes they share with
the hub, the store (a verdict marker is ``Verdict.as_json`` in an event's data), replay, the
reports and the TUI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sofa_top.agent.toggles import Toggle, toggle_name, toggle_of
from sofa_top.datamodel.evidence_json import evidence_json, parse_evidence
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.verdict_evidence import NO_EVIDENCE, VerdictEvidence
from sofa_top.datamodel.verdict_evidence import Measured as Measured
from sofa_top.datamodel.verdict_evidence import TimeSplit as TimeSplit
from sofa_top.datamodel.verdict_kinds import INPUT_CAUSES as INPUT_CAUSES
from sofa_top.datamodel.verdict_kinds import SEVERITIES as SEVERITIES
from sofa_top.datamodel.verdict_kinds import VERDICT_KINDS as VERDICT_KINDS
from sofa_top.datamodel.verdict_kinds import GpuCause as GpuCause
from sofa_top.datamodel.verdict_kinds import InputCauseKind as InputCauseKind
from sofa_top.datamodel.verdict_kinds import InputCauseSource as InputCauseSource
from sofa_top.datamodel.verdict_kinds import MeasuredEffect as MeasuredEffect
from sofa_top.datamodel.verdict_kinds import Severity as Severity
from sofa_top.datamodel.verdict_kinds import VerdictKind as VerdictKind

RANK_VERDICT_KINDS: tuple[VerdictKind, ...] = ("straggler", "balanced")


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
    evidence: VerdictEvidence = NO_EVIDENCE  # typed per kind (``datamodel.verdict_evidence``)
    recommendations: tuple[Recommendation, ...] = ()
    severity: Severity | None = None  # "high" / "moderate" where the kind has degrees

    def as_json(self) -> dict[str, object]:
        """The ``verdict`` object of ``record --json`` (and of a stored verdict marker)."""
        return {
            "kind": self.kind,
            "confidence": round(self.confidence, 2),
            "headline": self.headline,
            "severity": self.severity,
            "evidence": evidence_json(self.evidence),
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
        conf = d.get("confidence")
        kind = verdict_kind(d.get("kind"))
        return cls(
            kind=kind,
            confidence=float(conf) if isinstance(conf, int | float) else 0.0,
            headline=str(d.get("headline") or headline),
            evidence=parse_evidence(kind, d.get("evidence")),
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


NEIGHBOURS_BUSY = 0.5  # cores other processes must keep busy for their load to count


@dataclass(frozen=True, slots=True)
class InputCause:
    """Why the input stage is slow (``InputCauseKind``), with its numbers."""

    cause: InputCauseKind
    cpu_cores: float  # cores busy producing input while the loop waits
    usable_cores: int  # min(cores, the stage's parallelism)
    parallelism: int | None  # the input stage's parallelism, when known
    source: InputCauseSource  # schedstat, else agent or tree (``verdict_kinds``)
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
