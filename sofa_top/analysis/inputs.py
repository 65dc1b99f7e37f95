"""The input stage's cause and advice for a verdict: from the scheduler's accounting of its
producers (``analysis.causes``), else from its CPU during the loop's waits over the cores it
may use; the evidence fields a verdict carries with it."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from sofa_top.analysis import causes
from sofa_top.analysis.evidence import Evidence
from sofa_top.datamodel.samples import PipelineSample
from sofa_top.datamodel.verdict import InputCause, InputCauseKind, Recommendation
from sofa_top.datamodel.verdict_evidence import InputCauseFigures
from sofa_top.optimizers import advice

INPUT_CPU_BUSY = 0.60  # input stage using this share of its usable cores while waited on: cpu
INPUT_CPU_IDLE = 0.35  # at most this share: the stage mostly waits (latency)


def input_parallelism(p: PipelineSample | None) -> int | None:
    """The input stage's parallelism: DataLoader workers, the widest tf.data map/interleave."""
    if p is None:
        return None
    pars = [
        s.parallelism
        for s in p.stages
        if s.kind in ("source", "map", "interleave", "iterable", "generator", "py_dataset")
        and s.parallelism
        and s.parallelism > 0
    ]
    return max(pars) if pars else None


def input_cause(ev: Evidence) -> InputCause | None:
    """Why the input stage is slow (None when nothing was measured): from the scheduler's
    accounting of its producers where there is one, else from its CPU during the waits."""
    par = input_parallelism(ev.pipeline)
    cores = max(1, ev.cpu_count)
    # Unknown parallelism: AUTOTUNE in a declared pipeline may use every core; with no
    # pipeline known at all, assume the common serial loop.
    usable = min(cores, par) if par is not None else cores if ev.pipeline is not None else 1
    others = None if ev.neighbours is None else ev.neighbours.others_cores
    found = causes.producer_split(ev.steps, ev.pipeline, ev.sched, par, cores)
    if found is not None:
        kind = causes.cause_of(found.split, ev.neighbours)
        busy = min(found.split.on_cpu * found.count, float(cores))
        return InputCause(
            kind, busy, usable, par, "schedstat", found.split, found.producers, others,
            causes.contended(found.split, ev.neighbours),
        )  # fmt: skip
    measured = [s for s in ev.steps if s.wait_cpu_s is not None and s.input_wait_s > 0]
    wait = sum(s.input_wait_s for s in measured)
    child = max(0.0, ev.child_cpu or 0.0) / 100.0
    source: Literal["agent", "tree"]
    if wait > 0:
        busy = sum(s.wait_cpu_s or 0.0 for s in measured) / wait + child
        source = "agent"
    elif ev.tree_cpu is not None:
        busy = ev.tree_cpu / 100.0  # no agent: the whole tree is the closest bound
        source = "tree"
    else:
        return None
    # the stage cannot keep more cores busy than it has producers: the rest is other threads
    stage = min(busy, float(usable))
    util = InputCause("latency", stage, usable, par, source).utilization
    cause: InputCauseKind = (
        "cpu" if util >= INPUT_CPU_BUSY else "latency" if util <= INPUT_CPU_IDLE else "mixed"
    )
    return InputCause(cause, stage, usable, par, source, others_cores=others)


def wait_cpu_cores(ev: Evidence) -> float | None:
    """All the tree's CPU during the input waits, in cores (the stage's and other threads')."""
    measured = [s for s in ev.steps if s.wait_cpu_s is not None and s.input_wait_s > 0]
    wait = sum(s.input_wait_s for s in measured)
    if wait <= 0:
        return None
    child = max(0.0, ev.child_cpu or 0.0) / 100.0
    return sum(s.wait_cpu_s or 0.0 for s in measured) / wait + child


def loop_advice(
    ev: Evidence, fw: str, phase: str
) -> tuple[str, list[Recommendation], InputCauseFigures | None]:
    """A loop body that prepares its input: the cause for the headline, the fix that moves
    the preparation into the model's framework's input pipeline, and the cause's figures."""
    cores = max(1, ev.cpu_count)
    cause = input_cause(ev)
    text = ""
    figures = None
    if cause is not None:
        figures = cause_evidence(cause, ev)
        text = f"; {causes.cause_text(cause, cores, ev.neighbours)}"
    sizes = [s.batch_size for s in ev.steps if s.batch_size is not None]
    batch = max(set(sizes), key=sizes.count) if sizes else None
    grads = [s.autograd for s in ev.steps if s.autograd is not None]
    autograd = any(grads) if grads else None
    recs = advice.loop_input_recommendations(fw, phase, batch, cores, cause, autograd)
    return text, recs, figures


def iowait(ev: Evidence) -> float | None:
    return None if ev.system is None else ev.system.iowait


def input_advice(
    ev: Evidence, fw: str
) -> tuple[str, list[Recommendation], InputCauseFigures | None]:
    """The input stage's cause for the headline ("" when unknown), the input advice for it,
    and the cause's figures (None when unknown)."""
    cores = max(1, ev.cpu_count)
    cause = input_cause(ev)
    if cause is None:
        return "", advice.pipeline_recommendations(ev.pipeline, fw, cores), None
    recs = advice.input_recommendations(
        cause, ev.pipeline, fw, cores, iowait(ev), causes.names(ev.neighbours)
    )
    text = f"; {causes.cause_text(cause, cores, ev.neighbours)}"
    return text, recs, cause_evidence(cause, ev)


def cause_evidence(c: InputCause, ev: Evidence) -> InputCauseFigures:
    """The cause's figures, kept as the verdict reports them."""
    total = wait_cpu_cores(ev)
    return InputCauseFigures(
        cause=c.cause,
        # rounded where derived, as the JSON has it: a stored verdict reads back equal
        time_split=None
        if c.split is None
        else replace(
            c.split,
            on_cpu=round(c.split.on_cpu, 3),
            cpu_wait=round(c.split.cpu_wait, 3),
            blocked=round(c.split.blocked, 3),
        ),
        producers=c.producers or None,
        contention=c.contended,
        cpu_cores=round(c.cpu_cores, 3),
        usable_cores=c.usable_cores,
        parallelism=c.parallelism,
        cpu_utilization=round(c.utilization, 3),
        source=c.source,
        cores=max(1, ev.cpu_count),
        # measured: the CPU of every process outside the tree (the process collector's scan)
        others_cores=None if c.others_cores is None else round(c.others_cores, 3),
        neighbours=causes.neighbours_of_evidence(ev.neighbours),
        # all the tree's CPU during the waits: above cpu_cores, other threads were busy
        wait_cpu_cores=None if total is None else round(total, 3),
        # high iowait says the waiting is on local storage (not the network or a sleep)
        iowait_percent=iowait(ev),
    )
