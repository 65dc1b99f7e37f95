"""Ranks of a distributed job: per-rank statistics and the cross-rank verdict (pure functions).

In synchronous data parallelism every rank waits for the slowest one in each step's
collectives (DDP's gradient all-reduce, a barrier), so all ranks show the same step time and
the slow rank is the one that waits *least*. What tells ranks apart is their own time: the
step less the time blocked in collectives (input wait plus compute). The rank with the most
own time is the straggler when it exceeds the median rank's by ``STRAGGLER_GAP`` of the step;
what it costs the job is that gap: matching the median rank, every step would be that much
shorter. Where collective wait is not measured (TensorFlow ranks, unsynchronized processes),
a rank's own time is its step time.

Each rank also gets its own verdict from ``analysis.verdicts.judge`` over its own steps, its
own input pipeline and the CPU of its own DataLoader workers, so that the straggler's cause
(``latency``: it sleeps on storage; ``cpu``: it decodes) is its own, not the job's average.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.verdicts import MIN_STEPS, Evidence, judge
from sofa_top.datamodel.ranks import RankId, RankStat
from sofa_top.datamodel.samples import PipelineSample, ProcInfo, StepSample
from sofa_top.datamodel.units import Percent, Pid
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import (
    BalancedEvidence,
    JobFigures,
    JobVerdict,
    StragglerEvidence,
)

# The straggler's own time (step less collective wait) exceeds the median rank's by at least
# this share of the job's step: below it, ranks differ by noise (a 2-core machine running 4
# ranks shows ~5% between identical ranks).
STRAGGLER_GAP = 0.10
MIN_RANKS = 2  # a cross-rank verdict needs at least two ranks with steps


@dataclass(frozen=True, slots=True)
class RankEvidence:
    """What one rank's statistics are computed from (a window of the session, or all of it)."""

    ident: RankId
    pid: Pid
    steps: Sequence[StepSample] = ()
    tree_cpu: Percent | None = None  # the rank's process and its workers, % of one core
    child_cpu: Percent | None = None  # its workers only (DataLoader processes)
    pipeline: PipelineSample | None = None  # the input pipeline its agent reported
    alive: bool = True
    exit: str | None = None  # how it ended, once it did


def rank_roots(
    procs: Sequence[ProcInfo], reported: Mapping[Pid, tuple[Pid, RankId]] | None = None
) -> dict[Pid, RankId]:
    """The processes that *are* ranks, with their identity.

    A process is a rank when its environment names one and its parent's does not name the
    same one (a DataLoader worker inherits its rank's environment; the torchrun launcher has
    none). ``reported`` adds ranks the agents reported (pid -> (ppid, rank)) for processes whose
    environment could not be read.
    """
    known: dict[Pid, tuple[Pid, RankId]] = {
        p.pid: (p.ppid, p.rank) for p in procs if p.rank is not None
    }
    for pid, (ppid, ident) in (reported or {}).items():
        known.setdefault(pid, (ppid, ident))
    roots: dict[Pid, RankId] = {}
    for pid, (ppid, ident) in known.items():
        parent = known.get(ppid)
        if parent is None or _key(parent[1]) != _key(ident):
            roots[pid] = ident
    return roots


def _key(ident: RankId) -> tuple[int, str]:
    return ident.rank, ident.node


def owners(parents: Mapping[Pid, Pid], roots: Collection[Pid]) -> dict[Pid, Pid]:
    """Each process of the tree (pid -> ppid) -> the rank it belongs to: its nearest rank
    ancestor, or itself; processes outside every rank (the launcher) are left out."""
    out: dict[Pid, Pid] = {}
    for start in parents:
        pid, seen = start, 0
        while pid not in roots and pid in parents and seen < 64:  # 64: a cycle in ppid data
            pid, seen = parents[pid], seen + 1
        if pid in roots:
            out[start] = pid
    return out


def rank_stat(ev: RankEvidence, common: Evidence) -> RankStat:
    """One rank's step split and its own verdict (``common``: the machine-wide evidence)."""
    steps = list(ev.steps)
    total = sum(s.duration_s for s in steps)
    measured = [s.collective_s for s in steps if s.collective_s is not None]
    verdict = judge(
        dataclasses.replace(
            common,
            steps=steps,
            stacks=None,  # py-spy samples the whole tree; the rank's steps say more
            tree_cpu=ev.tree_cpu,
            child_cpu=ev.child_cpu,
            pipeline=ev.pipeline,
        )
    )
    return RankStat(
        rank=ev.ident.rank,
        pid=ev.pid,
        node=ev.ident.node,
        local_rank=ev.ident.local_rank,
        world_size=ev.ident.world_size,
        steps=len(steps),
        step_s=statistics.median(s.duration_s for s in steps) if steps else None,
        input_wait_fraction=step_facts.input_fraction(steps),
        collective_wait_fraction=min(1.0, sum(measured) / total)
        if measured and total > 0
        else None,
        verdict=verdict,
        cpu_percent=ev.tree_cpu,
        alive=ev.alive,
        exit=ev.exit,
    )


def rank_stats(evidence: Sequence[RankEvidence], common: Evidence) -> tuple[RankStat, ...]:
    """Every rank's statistics, by rank (then node)."""
    stats = [rank_stat(ev, common) for ev in evidence]
    return tuple(sorted(stats, key=lambda s: (s.rank, s.node, s.pid)))


def own_time(s: RankStat) -> float | None:
    """The rank's own time per step: its step less the time it waited for the others."""
    if s.step_s is None:
        return None
    return s.step_s * (1.0 - (s.collective_wait_fraction or 0.0))


def cross_rank_verdict(stats: Sequence[RankStat]) -> Verdict | None:
    """``straggler`` or ``balanced`` over the ranks with enough steps (None: fewer than two)."""
    active = [s for s in stats if s.steps >= MIN_STEPS and s.step_s and own_time(s) is not None]
    if len(active) < MIN_RANKS:
        return None
    job_step = statistics.median(s.step_s or 0.0 for s in active)
    owns = {id(s): own_time(s) or 0.0 for s in active}
    slowest = max(active, key=lambda s: owns[id(s)])
    median_own = statistics.median(owns.values())
    gap = owns[id(slowest)] - median_own
    others = [s for s in active if s is not slowest]
    waits = [s.collective_wait_fraction for s in others if s.collective_wait_fraction is not None]
    others_wait = statistics.median(waits) if waits else None
    measured = any(s.collective_wait_fraction is not None for s in active)
    job = JobFigures(
        ranks=len(active),
        step_s=round(job_step, 6),
        steps_per_s=round(1.0 / job_step, 3),
        collective_wait_measured=measured,
        others_collective_wait_fraction=_round(others_wait),
    )
    if job_step <= 0 or gap < STRAGGLER_GAP * job_step:
        spread = (max(owns.values()) - min(owns.values())) / job_step if job_step > 0 else 0.0
        waits_all = [
            s.collective_wait_fraction for s in active if s.collective_wait_fraction is not None
        ]
        coll = (
            f"; collectives take {statistics.median(waits_all):.0%} of each step"
            if waits_all
            else ""
        )
        return Verdict(
            "balanced",
            min(0.9, 0.5 + 0.1 * len(active)),
            f"balanced: {len(active)} ranks within {spread:.0%} of a step of each other{coll}",
            BalancedEvidence(job, round(spread, 3)),
        )
    matched = max(job_step - gap, 1e-9)
    own = slowest.verdict
    cause = slowest.cause
    what: str = own.kind if own is not None else "slow"
    if own is not None and own.kind == "input-bound" and cause != own.kind:
        what += f" ({cause})"
    who = "the other rank waits" if len(others) == 1 else f"the other {len(others)} ranks wait"
    wait_text = (
        f"{who} {others_wait:.0%} of each step for it in collectives"
        if others_wait is not None
        else f"its own time is {gap / job_step:.0%} of a step above the median rank's"
    )
    headline = (
        f"straggler: rank {slowest.rank} (node {slowest.node}) is {what}; {wait_text}; at the "
        f"median rank's pace the job would run {1.0 / matched:.1f} instead of "
        f"{1.0 / job_step:.1f} steps/s"
    )
    evidence = StragglerEvidence(
        job=job,
        rank=slowest.rank,
        local_rank=slowest.local_rank,
        node=slowest.node,
        pid=slowest.pid,
        verdict=own.kind if own is not None else None,
        cause=cause,
        rank_headline=own.headline if own is not None else "",
        gap_s=round(gap, 6),
        steps_per_s_if_matched=round(1.0 / matched, 3),
        speedup_if_matched=round(job_step / matched, 3),
    )
    confidence = min(0.95, 0.5 + 0.1 * len(active) + gap / job_step / 2)
    recs = own.recommendations if own is not None else ()
    return Verdict("straggler", confidence, headline, evidence, recs)


def headline_verdict(job: Verdict | None, ranks: Verdict | None) -> Verdict | None:
    """The verdict a distributed job leads with: its straggler, when one rank holds the others
    back (its cause and fix first; the job-level average, which would contradict it, is kept
    in its evidence as ``job_verdict``); else the job's own."""
    if ranks is None or ranks.kind != "straggler":
        return job
    if job is None or not isinstance(ranks.evidence, StragglerEvidence):
        return ranks
    kept = JobVerdict(job.kind, job.headline)
    return dataclasses.replace(
        ranks, evidence=dataclasses.replace(ranks.evidence, job_verdict=kept)
    )


def straggler_json(verdict: Verdict | None) -> dict[str, object] | None:
    """The ``straggler`` object of ``record --json`` / ``cluster --json`` (None: no straggler)."""
    if verdict is None or verdict.kind != "straggler":
        return None
    ev = verdict.evidence
    if not isinstance(ev, StragglerEvidence):
        return None
    out: dict[str, object] = {
        "rank": ev.rank,
        "local_rank": ev.local_rank,
        "node": ev.node,
        "pid": ev.pid,
        "verdict": ev.verdict,
        "cause": ev.cause,
        "others_collective_wait_fraction": ev.job.others_collective_wait_fraction,
        "step_s": ev.job.step_s,
        "steps_per_s": ev.job.steps_per_s,
        "steps_per_s_if_matched": ev.steps_per_s_if_matched,
        "speedup_if_matched": ev.speedup_if_matched,
        "gap_s": ev.gap_s,
        "ranks": ev.job.ranks,
    }
    out["headline"] = verdict.headline
    out["recommendations"] = [r.text for r in verdict.recommendations]
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
