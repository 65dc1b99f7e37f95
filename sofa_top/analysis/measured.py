"""What comparisons measured, carried into the verdict (pure functions).

A verdict's advice rests on what the session saw; a comparison (``compare``, or the optimizer
panel) measures what a toggle does. Once measured, the verdict never contradicts it:

- a toggle measured faster: its advice is quoted with the measurement (``measured: prefetch
  x3.63 at parallelism 16``) and comes first; advice that said that lever cannot help is
  withdrawn;
- a toggle measured slower, or no clearly different: its advice is withdrawn, and one line says
  what was measured;
- a toggle that did not apply: its advice says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from sofa_top.agent import toggles as tg
from sofa_top.agent.toggles import Toggle
from sofa_top.datamodel.verdict import UNMEASURED, Measured, Recommendation, Verdict
from sofa_top.datamodel.verdict_evidence import ProcessEvidence

# advice texts that rule a lever out; a measurement that found it winning withdraws them
RULED_OUT = {tg.PREFETCH: ("cannot help", "more parallelism than the")}


def latest(measured: Iterable[Measured]) -> tuple[Measured, ...]:
    """The last measurement of each toggle, in the order they were first measured."""
    out: dict[Toggle, Measured] = {}
    for m in measured:
        out[m.toggle] = m
    return tuple(out.values())


def _measured(text: str) -> str:
    """An advice's text without its "not measured here" note (it now is)."""
    at = text.rfind(UNMEASURED)
    return text if at < 0 else text[:at]


def _rules_out(r: Recommendation, toggle: Toggle) -> bool:
    return r.toggle is None and any(w in r.text for w in RULED_OUT.get(toggle, ()))


def apply_measured(verdict: Verdict, measured: Sequence[Measured]) -> Verdict:
    """``verdict`` with what was measured quoted, and the advice it contradicts withdrawn."""
    if not measured:
        return verdict
    found = latest(measured)
    recs = list(verdict.recommendations)
    first: list[Recommendation] = []
    notes: list[Recommendation] = []
    for m in found:
        mine = [r for r in recs if r.toggle == m.toggle]
        if m.effect == "faster":
            recs = [r for r in recs if not _rules_out(r, m.toggle) and r.toggle != m.toggle]
            if mine:
                first += [replace(r, text=f"{_measured(r.text)} ({m.text})") for r in mine[:1]]
                recs = mine[1:] + recs
            else:
                first.append(
                    Recommendation(f"{m.text}: {m.change or 'apply its code change'}", m.toggle)
                )
        elif m.effect == "not-applied":
            recs = [r for r in recs if r.toggle != m.toggle]
            notes.append(Recommendation(m.text))
        else:
            recs = [r for r in recs if r.toggle != m.toggle]
            notes.append(Recommendation(f"{m.text}: not advised here"))
    headline = verdict.headline
    wins = [m for m in found if m.effect == "faster"]
    if wins:
        best = max(wins, key=lambda m: m.speedup or 0.0)
        headline += f"; {best.text}"
    evidence = verdict.evidence
    if isinstance(evidence, ProcessEvidence):  # a process's verdict quotes what was measured
        evidence = replace(evidence, measured=found)
    return replace(
        verdict, headline=headline, evidence=evidence, recommendations=(*first, *recs, *notes)
    )
