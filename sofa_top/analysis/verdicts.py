"""Verdicts: why is the workload slow? Pure functions over the recent window of samples.

Thresholds live here and nowhere else. A step spending a fraction f of its time waiting for
input gains at most 1/(1-f) from any input lever (prefetch, workers, parallel calls), so input
leads the verdict only where that bound is worth the lever: f >= ``INPUT_BOUND_FRACTION``,
20%, the TensorBoard/XProf input-pipeline analyzer's *highly* input-bound, where compare
measured the lever ahead (see there). Between XProf's 5% ("moderately input-bound") and it the
verdict names what dominates the step, with the input share, its bound and the input lever
after its own advice.

Evidence, best first:
1. step telemetry from the in-process agent (launch mode): exact input wait per step; a loop
   no fetch marks gets its steps from its model calls, whose host time the loop thread's stacks
   split (input, python, syncs: ``analysis.host``);
2. stack classification (attach mode): the share of the loop thread's samples spent
   waiting in an input iterator vs inside framework compute.
Where neither says enough, the verdict is ``unknown`` with the reason, never a guess: a clock
that cannot time the input (optimizer steps, backward passes) decides nothing on its own.

Steps are judged per phase (``analysis.steps.by_phase``): an evaluation pass inside training
never mixes into the training steps' numbers; the verdict is about the training steps when the
window has enough, else about the phase that has the most, and says which.

An input-bound verdict also names its cause, because the fixes differ (``analysis.causes``
reads it from the scheduler's accounting of the producers' threads: on a CPU, waiting for one,
blocked):

- ``cpu``: producing input keeps its producers on a CPU (a heavy map or ``__getitem__``).
  Parallelism helps up to the core count; caching after the expensive step, preprocessing
  offline, lighter decoding or more cores are the levers past it.
- ``latency``: the producers are mostly blocked: they sleep on storage, the network, a lock.
  Parallelism well beyond the core count hides the latency.
- ``contention``: the producers mostly wait for a CPU that other processes hold; the busiest of
  those are named.
- ``mixed``: in between.

Where the scheduler's accounting is missing (no schedstat; a session of an older version), the
measure is the input stage's CPU while the loop waits over min(cores, its parallelism): the
process's own CPU time during each wait (the agent measures it) plus the CPU of its child
processes. A stage cannot use more cores than its parallelism: CPU beyond that during the waits
is other threads (OpenMP pools spinning after the last op) and is kept apart
(``wait_cpu_cores``), never counted as the stage's.

Nothing is ruled out that a measurement found: a comparison's results (``Evidence.measured``)
are quoted with the advice they confirm, and advice they contradict is withdrawn.

Cores are always the cores the workload may use (its CPU affinity and cgroup quota:
``Evidence.cpu_count``, from ``collectors.cores.workload_cores`` live and in replay), one count
for the headline and the advice, written "X of N cores" with X <= N.

``cpu-oversubscribed``: the tree's threads want more cores than it gets. Its threads wait for a
CPU ``OVERSUB_MIN_WAITING`` cores' worth or more, ``OVERSUB_POOL_WAITING`` of it threads other
than the loop's (a pool, not one thread on a busy machine), as the scheduler accounts it;
without that accounting, its runnable threads (state R, counted twice a second) exceed the
cores it is busy on by as much, with at least ``OVERSUB_MIN_RUNNABLE`` of them. Its
evidence tells the two sources apart: the tree's own pools (more runnable threads than cores:
fewer threads is the fix) and other processes holding the cores (named; a thread cap then
depends on what they do, and says it is not measured).
A spin-waiting OpenMP/BLAS pool pays for every thread that waits for a core at each barrier: an
LBFGS loop with 2 OpenMP threads on 2 cores that other processes kept busy ran 25x slower than
with 1 thread (0.20 vs 4.98 s for 100 steps, this repository's 2-core VM; 1.86 threads runnable,
0.50 cores busy). A framework's default pool on an otherwise idle machine gets the cores its
threads want, and does not trip it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from sofa_top.agent import toggles as tg
from sofa_top.analysis import causes, stackstats
from sofa_top.analysis import gpu as gpu_loop
from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.classify import writes_output
from sofa_top.analysis.evidence import Evidence as Evidence  # re-exported: judge's input
from sofa_top.analysis.framework import model_framework
from sofa_top.analysis.inputs import cause_evidence, input_advice, input_cause, iowait, loop_advice
from sofa_top.analysis.load import gpu_util, machine_load
from sofa_top.analysis.measured import apply_measured
from sofa_top.datamodel import verdict_evidence as ve
from sofa_top.datamodel.samples import PipelineSample
from sofa_top.datamodel.snapshot import StackSummary
from sofa_top.datamodel.verdict import UNMEASURED, Recommendation, Verdict, unmeasured
from sofa_top.datamodel.verdict_kinds import Device
from sofa_top.optimizers import advice

HIGH_INPUT_FRACTION = 0.20  # XProf: "highly input-bound"
MODERATE_INPUT_FRACTION = 0.05  # XProf: "moderately input-bound": worth a line, not the verdict
# Input leads the verdict from here (an input lever gains at most 1/(1-f) = 1.25x, XProf's
# "highly input-bound"): below it compare did not find the lever clearly ahead on a shared
# 2-core machine (benchmarks/README, "Input share vs lever": DataLoader workers beside the
# model at 2-18% input measured 1.03-1.22x, every interval overlapping the baseline's; at 24-25%
# clearly faster), and the peers' compute-bound workload read 8-11%.
INPUT_BOUND_FRACTION = HIGH_INPUT_FRACTION
MIN_STEPS = 3  # fewer steps in the window say too little
STACK_INPUT_FRACTION = HIGH_INPUT_FRACTION  # same bar for the stack-based estimate
STACK_DOMINANT = 0.50  # a class holding half the loop thread's samples dominates it
IDLE_CPU_PERCENT = 5.0  # the whole tree below this (of one core) is idle
GPU_UNDERUSED_PERCENT = 50.0  # a GPU below this while compute-bound is underused
MEMORY_PRESSURE = 0.95  # used / total memory
WINDOW_S = 10.0  # verdicts look at about the last 10 s
OVERSUB_MIN_RUNNABLE = 1.5  # mean runnable threads of the tree: a pool wants cores at once
# cores' worth of the tree's threads waiting for a CPU (measured; without the scheduler's
# accounting, its runnable threads beyond the cores it is busy on)
OVERSUB_MIN_WAITING = 0.75
# ... of which the threads other than the loop's (a pool: one thread starved by neighbours is
# contention a thread cap cannot help); measured, it replaces OVERSUB_MIN_RUNNABLE, whose
# twice-a-second count of R threads read 1.4-1.5 for a 2-thread LBFGS pool waiting 1.3 cores
OVERSUB_POOL_WAITING = 0.25


def oversubscription(ev: Evidence) -> tuple[float, float, float] | None:
    """(runnable threads, cores busy, cores' worth of threads waiting for a CPU) when the
    tree's threads wait for cores; else None."""
    if ev.runnable_threads is None or ev.tree_cpu is None:
        return None
    busy = min(max(0.0, ev.tree_cpu) / 100.0, float(max(1, ev.cpu_count)))
    runnable = ev.runnable_threads
    tree = ev.sched.get("tree")
    if tree is not None:
        # measured: the tree waits for cores, and not only its loop thread (a pool does) ...
        pool = causes.pool_waiting(ev.sched)  # its other threads and processes
        waits = tree.cpu_wait >= OVERSUB_MIN_WAITING and pool >= OVERSUB_POOL_WAITING
        # ... and its pools (one per process that steps a loop) are wider than the cores it
        # gets (else no thread cap lowers them: a pool sized to the one core it was given,
        # starved by neighbours, is not oversized)
        size = causes.job_pool(ev.model, ev.steps)
        cap = advice.thread_count(max(1, ev.cpu_count), busy)
        wide = size > cap if size is not None else runnable >= OVERSUB_MIN_RUNNABLE
        return (runnable, busy, tree.cpu_wait) if waits and wide else None
    # without the scheduler's accounting: what the runnable count says
    if runnable >= OVERSUB_MIN_RUNNABLE and runnable - busy >= OVERSUB_MIN_WAITING:
        return runnable, busy, runnable - busy
    return None


def _oversubscribed(ev: Evidence, fw: str, draft: ve.ProcessEvidence) -> Verdict | None:
    found = oversubscription(ev)
    if found is None:
        return None
    runnable, busy, waiting = (round(x, 2) for x in found)
    cores = max(1, ev.cpu_count)
    nb = ev.neighbours
    pool = None if ev.model is None else ev.model.intra_op_threads
    source = causes.oversubscribed_by(runnable, cores, nb, causes.job_pool(ev.model, ev.steps))
    found_over = ve.Oversubscription(
        runnable_threads=runnable,
        cores_busy=busy,
        cores=cores,
        threads_waiting=waiting,
        intra_op_threads=pool,
        oversubscribed_by=source,
        others_cores=None if nb is None else round(nb.others_cores, 3),
        neighbours=causes.neighbours_of_evidence(nb),
    )
    n = f"{cores} core{'s' if cores > 1 else ''}"
    why = {
        "own-pool": "its own thread pools outnumber the cores",
        "neighbours": f"its threads wait for cores: {nb and nb.text(cores)}",
        "both": f"its pools outnumber the cores and {nb and nb.text(cores)}",
        "unknown": "its thread pools wait for cores",
    }[source]
    return Verdict(
        "cpu-oversubscribed",
        0.7,
        f"cpu-oversubscribed: {runnable:.1f} threads want a core but the workload gets "
        f"{busy:.1f} of {n}; {why}",
        ve.as_kind(ve.OversubscribedEvidence, draft, oversubscription=found_over),
        advice.oversubscribed_recommendations(
            fw or "torch",
            cores,
            busy,
            ev.model,
            neighbours=causes.names(nb) if source in ("neighbours", "both") else None,
            own=source in ("own-pool", "both"),
            processes=causes.trainers(ev.steps),
        ),
    )


def _keras(ev: Evidence) -> bool:
    return any(step_facts.keras_clock(s.source) for s in ev.steps[-50:]) or bool(
        ev.model is not None and ev.model.keras_model
    )


def _framework(ev: Evidence) -> str:
    """The framework of the workload's model (``analysis.framework``)."""
    return model_framework(ev.steps, ev.model, ev.pipeline, ev.frameworks, ev.stacks)


def _bottleneck(p: PipelineSample | None) -> str | None:
    if p is None:
        return None
    stage = next((s for s in p.stages if s.is_bottleneck), None)
    return None if stage is None else stage.name


def judge(ev: Evidence) -> Verdict:
    """The verdict for one window of evidence."""
    facts = ev.facts
    if step_facts.failed(facts) and len(ev.steps) < MIN_STEPS:
        # it died before there was a loop to judge (at import, say): the failure is the news,
        # never a verdict on its import machinery's stacks
        reason = (
            step_facts.no_steps_reason(facts)
            if not ev.steps
            else f"only {len(ev.steps)} step(s) before it failed"
        )
        return Verdict(
            "unknown",
            0.0,
            f"unknown: {step_facts.failure_text(facts)}",
            ve.UnknownEvidence(steps_reason=reason, failure=ve.Failure(facts.workload_error)),
            (Recommendation(step_facts.next_step(facts)),),
        )
    verdict = apply_measured(_beside_neighbours(_judge(ev), ev), ev.measured)
    if not step_facts.failed(facts):
        return verdict
    why = f": {facts.workload_error}" if facts.workload_error else ""
    evidence = verdict.evidence
    if isinstance(evidence, ve.ProcessEvidence):
        evidence = replace(evidence, failure=ve.Failure(facts.workload_error))
    return replace(
        verdict,
        headline=f"{verdict.headline} (then the workload failed with exit code "
        f"{facts.exit_code}{why})",
        evidence=evidence,
    )


# verdicts on the loop's own work, whose advice a thread cap beside busy neighbours joins (a
# cpu-oversubscribed verdict names the threads itself; memory, idleness, a GPU are other news)
SHARED_CORES_KINDS = ("compute-bound", "input-bound", "python-overhead")


def _beside_neighbours(v: Verdict, ev: Evidence) -> Verdict:
    """Beside neighbours that keep ``NEIGHBOURS_BUSY`` cores busy, a thread cap may win (the
    pool stops waiting for them) or lose, with what they run: it is offered, unmeasured, never
    judged of no help (load that comes and goes can leave a window's pools unstarved while
    compare, over many runs, measures the cap ahead)."""
    nb = ev.neighbours
    if (
        nb is None
        or nb.others_cores < causes.NEIGHBOURS_BUSY
        or v.kind not in SHARED_CORES_KINDS
        or any(r.toggle == tg.THREADS for r in v.recommendations)
    ):
        return v
    cores = max(1, ev.cpu_count)
    extra = advice.shared_cores_recommendations(
        _framework(ev), cores, nb.others_cores, nb.text(cores)
    )
    return replace(v, recommendations=v.recommendations + extra)


def _judge(ev: Evidence) -> Verdict:
    fw = _framework(ev)
    # what other processes keep busy (measured), whatever the verdict
    others = None if ev.neighbours is None else ev.neighbours.others_cores
    base = ve.ProcessEvidence(load=machine_load(ev.tree_cpu, ev.cpu_count, ev.gpu, others))
    if ev.system is not None and ev.system.mem_total:
        used = _share(ev.system.mem_used / ev.system.mem_total)
        if used >= MEMORY_PRESSURE:
            return Verdict(
                "memory-pressure",
                0.8,
                f"memory-pressure: {used:.0%} of RAM in use; swapping slows every step",
                ve.as_kind(ve.MemoryPressureEvidence, base, memory_used_fraction=used),
                advice.memory_pressure_recommendations(),
            )
    if len(ev.steps) >= MIN_STEPS:
        phases = step_facts.by_phase(ev.steps, ev.training)
        phase = step_facts.main_phase(phases, MIN_STEPS) or "train"
        ev = replace(ev, steps=phases.get(phase, ev.steps))
        base = replace(base, phase=phase)
        return _judge_gpu_steps(ev, fw, base) or _judge_steps(ev, fw, base, phase)
    if (
        ev.tree_cpu is not None
        and ev.tree_cpu < IDLE_CPU_PERCENT
        and (ev.stacks is None or _split(ev.stacks, "idle") >= STACK_DOMINANT)
    ):
        idle = ve.as_kind(ve.IdleEvidence, base)
        return Verdict("idle", 0.7, f"idle: the process tree uses {ev.tree_cpu:.0f}% CPU", idle)
    reason = (
        f"only {len(ev.steps)} step(s) so far (a verdict from steps needs {MIN_STEPS})"
        if ev.steps
        else step_facts.no_steps_reason(ev.facts)
    )
    base = replace(base, steps_reason=reason)
    if ev.stacks is not None:
        return _judge_stacks(ev, fw, base)
    return Verdict(
        "unknown",
        0.0,
        f"unknown: no stack samples yet, and {reason}",
        ve.as_kind(ve.UnknownEvidence, base),
        _next_step(ev),
    )


def _next_step(ev: Evidence) -> tuple[Recommendation, ...]:
    """The way to more evidence that this session's mode allows."""
    if ev.facts.agent_state == "none" and not step_facts.failed(ev.facts):
        return advice.launch_recommendations()
    return (Recommendation(step_facts.next_step(ev.facts)),)


def _step_figures(ev: Evidence, input_fraction: float | None) -> ve.StepFigures:
    """The judged steps' figures: their input share and spread, which clock they came from,
    and whether it timed the input wait."""
    stacks = ev.stacks
    host = stacks.host_split if stacks is not None else None
    setup = stacks.call_setup_share if stacks is not None else None
    durations = [s.duration_s for s in ev.steps]
    source = step_facts.main_source(ev.steps)
    name = step_facts.main_label(ev.steps)
    agent = ev.facts.agent
    note = dict(agent.step_notes).get(name or "") if agent is not None else None
    return ve.StepFigures(
        input_fraction=input_fraction,
        steps=len(ev.steps),
        median_step_s=step_facts.percentile(durations, 0.5),
        p90_step_s=step_facts.percentile(durations, 0.9),
        p99_step_s=step_facts.percentile(durations, 0.99),
        bottleneck_stage=_bottleneck(ev.pipeline),
        compute_split=step_facts.compute_split(ev.steps),
        host_split=None if host is None else {k: round(v, 3) for k, v in host.items()},
        call_setup_share=_round(setup),
        step_source=name,
        step_sources=step_facts.step_sources(ev.steps),
        input_wait_measured=step_facts.wait_measured(source),
        step_note=note,
    )


def _judge_steps(ev: Evidence, fw: str, base: ve.ProcessEvidence, phase: str = "train") -> Verdict:
    stacks = ev.stacks
    host = stacks.host_split if stacks is not None else None
    setup = stacks.call_setup_share if stacks is not None else None
    n_host = stacks.host_samples if stacks else 0
    measured = _round(step_facts.input_fraction(ev.steps, host, n_host))
    frac = measured or 0.0
    figures = _step_figures(ev, measured)
    evidence = replace(base, steps=figures)
    conf = min(0.95, 0.5 + 0.05 * len(ev.steps))
    noun = {"train": "step", "eval": "evaluation step"}.get(phase, "inference step")
    in_body = step_facts.model_call(step_facts.main_source(ev.steps))
    if measured is None:
        return _judge_unmeasured(ev, fw, evidence, conf)
    # a little host time the stacks could not split may be the loop's own Python: only a
    # share past the high bar is called input without them
    unsplit = in_body and (stacks is None or stacks.host_samples < step_facts.MIN_HOST_SAMPLES)
    if frac >= (HIGH_INPUT_FRACTION if unsplit else INPUT_BOUND_FRACTION):
        high = frac >= HIGH_INPUT_FRACTION
        stage = figures.bottleneck_stage
        where = f" in stage {stage}" if stage else ""
        headline = f"input-bound: {frac:.0%} of each {noun} waits for input{where}"
        if in_body:
            headline = (
                f"input-bound: {frac:.0%} of each {noun} prepares its input in the loop body, "
                "outside the model"
            )
            cause_text, recs, cause = loop_advice(ev, fw, phase)
        else:
            cause_text, recs, cause = input_advice(ev, fw)
        headline += cause_text
        return Verdict(
            "input-bound",
            conf if high else conf * 0.8,
            headline,
            ve.as_kind(ve.InputBoundEvidence, evidence, input_cause=cause),
            tuple(recs),
            severity="high" if high else "moderate",
        )
    evidence, minor = _minor_input(ev, fw, evidence, frac)
    over = _oversubscribed(ev, fw, evidence)
    if over is not None:
        return minor(over)
    gpu = gpu_util(ev.gpu)
    if gpu is not None and gpu < GPU_UNDERUSED_PERCENT:
        return minor(
            Verdict(
                "gpu-underutilized",
                conf * 0.8,
                f"gpu-underutilized: compute-bound on the host, GPU at {gpu:.0f}%",
                ve.as_kind(ve.GpuUnderutilizedEvidence, evidence),
                advice.gpu_recommendations(),
            )
        )
    # NVML alone (no CUDA readings from the agent): a GPU this busy is the one computing
    device: Device = "gpu" if gpu is not None and gpu >= 100 * gpu_loop.GPU_BUSY_HIGH else "cpu"
    headline = f"compute-bound: only {frac:.0%} of each {noun} waits for input"
    return minor(
        Verdict(
            "compute-bound",
            conf,
            headline,
            ve.as_kind(ve.ComputeBoundEvidence, evidence, device=device),
            advice.compute_recommendations(
                fw, ev.model, _keras(ev), setup, step_facts.output_fraction(ev.steps, host, n_host)
            ),
        )
    )


def _minor_input(
    ev: Evidence, fw: str, evidence: ve.ProcessEvidence, frac: float
) -> tuple[ve.ProcessEvidence, Callable[[Verdict], Verdict]]:
    """For an input wait between XProf's moderate bar and ``INPUT_BOUND_FRACTION``: the
    evidence with the most an input lever can gain (and the input's cause), and what adds the
    input share and that bound after the verdict's own headline, and the input lever after its
    own advice; otherwise the evidence and the verdict as they are."""
    timed = evidence.steps is None or evidence.steps.input_wait_measured
    if frac < MODERATE_INPUT_FRACTION or not timed:
        return evidence, lambda v: v
    bound = 1.0 / (1.0 - frac)
    _, recs, cause = input_advice(ev, fw)
    evidence = replace(evidence, input_speedup_bound=round(bound, 3), input_cause=cause)
    note = f"at most {bound:.2f}x from the input: {frac:.0%} of each step waits for it"
    levers = tuple(
        Recommendation(
            f"{note}: {r.text}" + ("" if UNMEASURED in r.text else unmeasured()), r.toggle
        )
        for r in recs
        if r.toggle == tg.PREFETCH
    )

    def add(v: Verdict) -> Verdict:
        head = v.headline
        if v.kind != "compute-bound":
            head += f"; {frac:.0%} of each step waits for input (at most {bound:.2f}x from it)"
        else:
            head += f" (an input lever gains at most {bound:.2f}x)"
        return replace(v, headline=head, recommendations=v.recommendations + levers)

    return evidence, add


def _pinned(p: PipelineSample | None) -> bool:
    """The DataLoader pins its batches (a ``pin_memory`` stage)."""
    return p is not None and any(s.name == "pin_memory" for s in p.stages)


def _judge_gpu_steps(ev: Evidence, fw: str, base: ve.ProcessEvidence) -> Verdict | None:
    """A CUDA loop (the agent read CUDA): the GPU's busy fraction decides (``analysis.gpu``)."""
    load = gpu_loop.gpu_load(ev.steps, ev.cuda, ev.gpu)
    if load is None:
        return None
    b, f = _share(load.busy_fraction), _share(load.input_fraction)
    w, c = load.window, load.cuda
    figures = ve.GpuStepFigures(
        gpu_busy_fraction=b,
        gpu_busy_source=load.source,
        input_fraction=f,
        steps=len(ev.steps),
        median_step_s=step_facts.percentile([s.duration_s for s in ev.steps], 0.5),
        bottleneck_stage=_bottleneck(ev.pipeline),
        gpu_name=c.device_name if c else None,
        window=gpu_loop.window_evidence(w),
    )
    evidence = replace(base, gpu_steps=figures)
    conf = min(0.95, 0.5 + 0.05 * len(ev.steps)) * (1.0 if w is not None else 0.6)
    pinned = _pinned(ev.pipeline)
    if gpu_loop.waits_for_input(load, MODERATE_INPUT_FRACTION, HIGH_INPUT_FRACTION):
        high = f >= HIGH_INPUT_FRACTION
        headline = (
            f"input-bound: the GPU is busy {b:.0%} of each step; the loop waits {f:.0%} "
            "for the next batch"
        )
        cause_text, recs, cause = input_advice(ev, fw)
        headline += cause_text
        return Verdict(
            "input-bound",
            conf if high else conf * 0.8,
            headline,
            ve.as_kind(ve.InputBoundEvidence, evidence, input_cause=cause),
            advice.gpu_input_recommendations(recs, pinned),
            severity="high" if high else "moderate",
        )
    bf16 = c.bf16_supported if c else None
    if b >= gpu_loop.GPU_BUSY_HIGH:
        return Verdict(
            "compute-bound",
            conf,
            f"compute-bound: the GPU is busy {b:.0%} of each step"
            + (f" ({c.device_name})" if c and c.device_name else ""),
            ve.as_kind(ve.ComputeBoundEvidence, evidence, device="gpu"),
            advice.gpu_compute_recommendations(
                bf16,
                convs=bool(w and w.conv_kernels),
                half=bool(w and w.kernels and w.bf16_kernels >= w.kernels / 2),
            ),
        )
    why_idle = gpu_loop.gpu_cause(load)
    held = gpu_loop.memory_pressure(load)
    idle = ve.GpuIdle(why_idle)
    if held is not None:
        idle = ve.GpuIdle(why_idle, round(held, 3), load.alloc_retries)
    why = {
        "launch": "it waits between many small kernels while Python launches the next",
        "copy": "host-to-device copies hold it up",
        "cpu": "the host does other work between kernels",
        "memory-pressure": "the allocator is near the card's memory",
    }[why_idle]
    return Verdict(
        "gpu-underutilized",
        conf * 0.9,
        f"gpu-underutilized ({why_idle}): the GPU is busy {b:.0%} of each step; {why}",
        ve.as_kind(ve.GpuUnderutilizedEvidence, evidence, gpu_idle=idle),
        advice.gpu_underused_recommendations(why_idle, pinned, bf16),
        severity="high" if b < gpu_loop.GPU_BUSY_LOW else "moderate",
    )


def _split(s: StackSummary, klass: str) -> float:
    return float(s.split.get(klass, 0.0))


def _loop_thread(s: StackSummary) -> tuple[int, Mapping[str, float]]:
    """The busiest non-idle thread's samples and split (the loop, in nearly every program)."""
    best = None
    for t in s.threads:
        active = t.samples * (1.0 - t.split.get("idle", 0.0))
        if best is None or active > best[0]:
            best = (active, t.samples, t.split)
    return (best[1], best[2]) if best else (s.thread_samples, s.split)


def _judge_stacks(ev: Evidence, fw: str, base: ve.ProcessEvidence) -> Verdict:
    s = ev.stacks
    assert s is not None
    n, split = _loop_thread(s)
    inp, comp, py = (_share(split.get(k, 0.0)) for k in ("input", "compute", "python"))
    bars = ((inp, STACK_INPUT_FRACTION), (comp, STACK_DOMINANT), (py, STACK_DOMINANT))
    if not stackstats.readable(n, bars):
        return Verdict(
            "unknown",
            0.0,
            f"unknown: too few stack samples yet, and {base.steps_reason}",
            ve.as_kind(ve.UnknownEvidence, base),
            _next_step(ev),
        )
    evidence = replace(base, stacks=ve.StackShares(inp, comp, py))
    files = " ".join(f.filename for f in s.functions[:40])
    if inp >= STACK_INPUT_FRACTION:
        headline = f"input-bound: the loop thread waits for input in {inp:.0%} of samples"
        cores = max(1, ev.cpu_count)
        recs = advice.pipeline_recommendations(None, fw, cores)
        cause = input_cause(ev)
        figures = None
        if cause is not None:
            figures = cause_evidence(cause, ev)
            headline += f"; {causes.cause_text(cause, cores, ev.neighbours)}"
            recs = advice.input_recommendations(
                cause, None, fw, cores, iowait(ev), causes.names(ev.neighbours)
            )
        found = ve.as_kind(ve.InputBoundEvidence, evidence, input_cause=figures)
        return Verdict("input-bound", 0.6, headline, found, tuple(recs), severity="high")
    over = _oversubscribed(ev, fw, evidence)
    if over is not None:
        return over
    if "keras" in files and "trainer" in files:
        # Keras fit pulls batches inside a compiled function: the stacks cannot see the wait.
        why = "" if not ev.facts.launched else f" ({base.steps_reason})"
        return Verdict(
            "unknown",
            0.2,
            "unknown: Keras fit reads its input inside a compiled step, invisible "
            f"to stack sampling{why}",
            ve.as_kind(ve.UnknownEvidence, evidence),
            _next_step(ev),
        )
    if comp >= STACK_DOMINANT:
        return Verdict(
            "compute-bound",
            0.6,
            f"compute-bound: {comp:.0%} of the loop thread's samples in framework compute",
            ve.as_kind(ve.ComputeBoundEvidence, evidence),
            advice.compute_recommendations(fw, ev.model, "keras" in files),
        )
    if py >= STACK_DOMINANT:
        hot = next((f for f in s.functions if f.klass == "python"), None)
        writer = hot.function if hot and writes_output(hot.function, hot.filename) else None
        return Verdict(
            "python-overhead",
            0.6,
            f"python-overhead: {py:.0%} of samples in plain Python code",
            ve.as_kind(ve.PythonOverheadEvidence, evidence),
            advice.python_recommendations(writer),
        )
    return Verdict(
        "unknown",
        0.2,
        f"unknown: the stacks show no dominant activity, and {base.steps_reason}",
        ve.as_kind(ve.UnknownEvidence, evidence),
        _next_step(ev),
    )


def _judge_unmeasured(ev: Evidence, fw: str, evidence: ve.ProcessEvidence, conf: float) -> Verdict:
    """Steps from a clock that cannot time the input: the loop thread's stacks decide, or the
    verdict abstains (what is missing, how to mark the steps)."""
    source = step_facts.clock_text(step_facts.main_source(ev.steps)) or "its clock"
    why = f"steps from {source}; no fetch or model call marks the loop: input wait not measured"
    s = ev.stacks
    n, split = _loop_thread(s) if s is not None else (0, {})
    inp, comp = _share(split.get("input", 0.0)), _share(split.get("compute", 0.0))
    if not stackstats.readable(n, ((comp, STACK_DOMINANT), (inp, STACK_INPUT_FRACTION))):
        inp = comp = 0.0
    evidence = replace(evidence, stacks=ve.StackShares(inp, comp))
    # its threads' waits for a CPU are measured whatever the clock: a pool that outnumbers the
    # cores it gets is the news before any split of the loop's time
    over = _oversubscribed(ev, fw, evidence)
    if over is not None:
        return over
    if comp >= STACK_DOMINANT:
        return Verdict(
            "compute-bound",
            conf * 0.8,
            f"compute-bound: {why}; the loop thread computes in {comp:.0%} of samples",
            ve.as_kind(ve.ComputeBoundEvidence, evidence),
            advice.compute_recommendations(fw, ev.model, _keras(ev)),
        )
    if inp >= STACK_INPUT_FRACTION:
        return Verdict(
            "input-bound",
            0.6,
            f"input-bound: {why}; the loop thread waits for input in {inp:.0%} of samples",
            ve.as_kind(ve.InputBoundEvidence, evidence),
            tuple(advice.pipeline_recommendations(ev.pipeline, fw, max(1, ev.cpu_count))),
            severity="high",
        )
    return Verdict(
        "unknown",
        0.2,
        f"unknown: {why}, and the stacks do not tell input from compute",
        ve.as_kind(ve.UnknownEvidence, evidence),
        (Recommendation(step_facts.MARK_STEPS),),
    )


def _round(v: float | None) -> float | None:
    return None if v is None else _share(v)


def _share(v: float) -> float:
    """A number as the verdict keeps it: rounded once, where it is derived, so that its
    headline and its evidence (each printed as a percent) read the same."""
    return round(v, 3)
