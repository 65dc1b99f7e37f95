"""Why the input stage is slow, from what its threads did (pure functions).

The scheduler accounts each thread's time on a CPU and its time runnable but waiting for one
(``collectors/sched.py``); the rest of its time it slept or was blocked. The input stage's
producers are, by pipeline:

- the loop's own thread, during each input wait (a DataLoader without workers, a plain Python
  iterator): the agent reads that thread's accounting around every fetch (``StepSample.
  wait_run_s`` / ``wait_queue_s``): exact;
- a DataLoader's worker processes: all their threads, over the verdict's window, divided by
  the number of workers (an input-bound loop keeps every worker busy: its buffer never fills);
- tf.data's threads (the target's threads other than the loop's), divided by the stage's
  parallelism (the cores for AUTOTUNE); a pipeline without a prefetch works only while the loop
  waits for it, so over that share of the window.

Their time splits into ``TimeSplit`` (on a CPU / waiting for a CPU / blocked), and the cause
follows from it, not from a model of what other processes leave free:

- ``latency``: blocked at least ``LATENCY_BLOCKED`` of their time (storage, the network, a lock),
  or ``LATENCY_MAJOR`` and more than on a CPU or waiting for one; parallelism well past the
  cores hides it (other processes' load is named beside it);
- ``contention``: runnable but waiting for a CPU at least ``CONTENTION_WAIT`` of it while other
  processes keep at least ``NEIGHBOURS_BUSY`` cores busy: the stage gets what they leave. The
  busiest of them (the process collector's ``neighbours`` scan) are named;
- ``cpu``: on a CPU or waiting for one (the stage's own producers outnumbering the cores) at
  least ``CPU_BUSY`` of their time;
- ``mixed``: none of these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sofa_top.datamodel.samples import (
    Neighbour,
    PipelineSample,
    StepSample,
    ThreadGroup,
    ThreadTimes,
    TreeSched,
)
from sofa_top.datamodel.verdict import NEIGHBOURS_BUSY as NEIGHBOURS_BUSY  # the bar, one home
from sofa_top.datamodel.verdict import InputCause, InputCauseKind, TimeSplit
from sofa_top.datamodel.verdict_kinds import OversubscribedBy as OversubscribedBy  # one table
from sofa_top.datamodel.workload import ModelReport
from sofa_top.optimizers.advice.stages import view

LATENCY_BLOCKED = 0.60  # producers blocked this share of their time: they wait on I/O
# ... or half of it and more than anything else: the demo beside a hog on a machine at load 14
# (blocked 59%, waiting for a CPU 37%) still waits on its storage first; at 45% a serial CPU
# stage beside a hog (its getitem's allocations block) read latency
LATENCY_MAJOR = 0.50
CONTENTION_WAIT = 0.30  # ... runnable but not running this share: they wait for a CPU
CPU_BUSY = 0.60  # ... on a CPU or runnable this share: they compute
NOTABLE_WAIT = 0.10  # a latency stage that also waits for a CPU this share: say so
MIN_MEASURED_WAIT_S = 0.05  # measured input wait below this in the window says too little

SchedMeans = Mapping[ThreadGroup, ThreadTimes]


@dataclass(frozen=True, slots=True)
class Neighbours:
    """What other processes kept busy (the process collector's last ``neighbours`` scan)."""

    others_cores: float
    top: tuple[Neighbour, ...] = ()

    def text(self, cores: int) -> str:
        """``other processes keep 1.6 of 2 cores busy (python 4242: 1.0, ...)``."""
        names = ", ".join(f"{n.name} {n.pid}: {n.cores:.1f}" for n in self.top if n.cores >= 0.05)
        busy = (
            f"{min(self.others_cores, float(cores)):.1f} of {cores} core{'s' if cores > 1 else ''}"
        )
        return f"other processes keep {busy} busy" + (f" ({names})" if names else "")


def names(nb: Neighbours | None) -> tuple[tuple[int, str], ...]:
    """(pid, name) of the busiest other processes that take anything."""
    return () if nb is None else tuple((n.pid, n.name) for n in nb.top if n.cores >= 0.05)


def neighbours_of_evidence(nb: Neighbours | None) -> tuple[Neighbour, ...] | None:
    """``evidence.neighbours``: the busiest other processes and their cores."""
    return None if nb is None else nb.top


def neighbours_of(data: Mapping[str, object]) -> Neighbours | None:
    """A ``neighbours`` event's data as ``Neighbours`` (None when it is not one)."""
    others = data.get("others_cores")
    if not isinstance(others, int | float) or isinstance(others, bool) or others < 0:
        return None
    top: list[Neighbour] = []
    raw = data.get("top")
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        pid, name, cores = item.get("pid"), item.get("name"), item.get("cores")
        if isinstance(pid, int) and isinstance(cores, int | float):
            top.append(Neighbour(pid, str(name or "?"), float(cores)))
    return Neighbours(float(others), tuple(top))


def sched_means(readings: Iterable[TreeSched]) -> dict[ThreadGroup, ThreadTimes]:
    """Each group's cores on a CPU and waiting for one over ``readings`` (weighted by their
    spans), with its latest thread and process counts."""
    weight: dict[ThreadGroup, float] = {}
    on: dict[ThreadGroup, float] = {}
    wait: dict[ThreadGroup, float] = {}
    last: dict[ThreadGroup, ThreadTimes] = {}
    for r in readings:
        if r.error is not None or r.span_s <= 0:
            continue
        for g, t in r.groups:
            weight[g] = weight.get(g, 0.0) + r.span_s
            on[g] = on.get(g, 0.0) + t.on_cpu * r.span_s
            wait[g] = wait.get(g, 0.0) + t.cpu_wait * r.span_s
            last[g] = t
    return {
        g: ThreadTimes(on[g] / w, wait[g] / w, last[g].threads, last[g].io_blocked, last[g].procs)
        for g, w in weight.items()
        if w > 0
    }


def readings_of(
    points: Mapping[str, Sequence[tuple[float, float | None]]], since: float | None = None
) -> list[TreeSched]:
    """``TreeSched`` readings back from stored ``sched.<group>.<field>`` points (one reading
    per timestamp; the span is the time since the previous reading), those ending after
    ``since`` (the loop's first step: the interpreter's start and imports are not its work)."""
    by_ts: dict[float, dict[str, float]] = {}
    for name, pts in points.items():
        parts = name.split(".")
        if len(parts) != 3 or parts[0] != "sched":
            continue
        for ts, v in pts:
            if v is not None:
                by_ts.setdefault(ts, {})[f"{parts[1]}.{parts[2]}"] = v
    out: list[TreeSched] = []
    prev: float | None = None
    for ts in sorted(by_ts):
        f = by_ts[ts]
        groups: list[tuple[ThreadGroup, ThreadTimes]] = []
        for g in ("loop", "threads", "workers", "tree"):
            if f"{g}.on_cpu" in f:
                groups.append(
                    (
                        g,
                        ThreadTimes(
                            f[f"{g}.on_cpu"],
                            f.get(f"{g}.cpu_wait", 0.0),
                            int(f.get(f"{g}.threads", 0)),
                            int(f.get(f"{g}.io_blocked", 0)),
                            int(f.get(f"{g}.procs", 0)),
                        ),
                    )
                )
        if prev is not None and groups and (since is None or ts > since):
            out.append(TreeSched(ts - prev, tuple(groups)))
        prev = ts
    return out


@dataclass(frozen=True, slots=True)
class ProducerSplit:
    """The input producers' time and whose it is."""

    split: TimeSplit
    producers: str  # "the loop's thread", "2 DataLoader workers", "tf.data's threads"
    group: ThreadGroup
    count: int  # producers the split is divided over


def _split(on: float, wait: float) -> TimeSplit:
    on, wait = max(0.0, on), max(0.0, wait)
    total = on + wait
    if total > 1.0:  # threads handing work over (a pool) can overlap: scale to the whole
        on, wait = on / total, wait / total
    return TimeSplit(on, wait, max(0.0, 1.0 - on - wait))


def _loop_split(steps: Sequence[StepSample]) -> ProducerSplit | None:
    measured = [
        s
        for s in steps
        if s.wait_run_s is not None and s.wait_queue_s is not None and s.input_wait_s > 0
    ]
    wait = sum(s.input_wait_s for s in measured)
    if wait < MIN_MEASURED_WAIT_S:
        return None
    run = sum(s.wait_run_s or 0.0 for s in measured)
    queue = sum(s.wait_queue_s or 0.0 for s in measured)
    return ProducerSplit(_split(run / wait, queue / wait), "the loop's thread", "loop", 1)


def producer_split(
    steps: Sequence[StepSample],
    pipeline: PipelineSample | None,
    sched: SchedMeans,
    parallelism: int | None,
    cores: int,
) -> ProducerSplit | None:
    """The input producers' ``TimeSplit`` (None: not measured: no schedstat, no waits)."""
    v = view(pipeline)
    workers = sched.get("workers")
    if v.framework == "tf.data":
        threads = sched.get("threads")
        if threads is None:
            return None
        p = max(1, parallelism or cores)
        active = 1.0
        if not v.has("prefetch", "py_dataset"):
            # a synchronous pipeline works only while the loop waits for it
            total = sum(s.duration_s for s in steps)
            active = sum(s.input_wait_s for s in steps) / total if total > 0 else 1.0
        if active <= 0:
            return None
        return ProducerSplit(
            _split(threads.on_cpu / (p * active), threads.cpu_wait / (p * active)),
            "tf.data's threads" if p == 1 else f"tf.data's threads (parallelism {p})",
            "threads",
            p,
        )
    if workers is not None and workers.procs > 0 and (v.workers > 0 or v.framework != "torch"):
        n = workers.procs
        return ProducerSplit(
            _split(workers.on_cpu / n, workers.cpu_wait / n),
            f"{n} DataLoader worker{'s' if n > 1 else ''}" if v.framework else f"{n} workers",
            "workers",
            n,
        )
    return _loop_split(steps)


def cause_of(split: TimeSplit, neighbours: Neighbours | None) -> InputCauseKind:
    """The input cause a producers' time split says (see the module docstring)."""
    if split.blocked >= LATENCY_BLOCKED or (
        split.blocked >= LATENCY_MAJOR and split.blocked > max(split.on_cpu, split.cpu_wait)
    ):
        return "latency"
    busy_around = neighbours is not None and neighbours.others_cores >= NEIGHBOURS_BUSY
    if split.cpu_wait >= CONTENTION_WAIT and busy_around:
        return "contention"
    if split.on_cpu + split.cpu_wait >= CPU_BUSY:
        return "cpu"
    return "mixed"


def contended(split: TimeSplit | None, neighbours: Neighbours | None) -> bool:
    """The producers notably wait for a CPU that other processes hold (worth naming beside
    another cause)."""
    return (
        split is not None
        and neighbours is not None
        and split.cpu_wait >= NOTABLE_WAIT
        and neighbours.others_cores >= NEIGHBOURS_BUSY
    )


def trainers(steps: Sequence[StepSample]) -> int:
    """The job's processes that step a loop in ``steps`` (spawned trainers, DDP ranks): each
    runs its framework's intra-op pool of its own on the job's cores."""
    return max(1, len({s.pid for s in steps}))


def job_pool(model: ModelReport | None, steps: Sequence[StepSample]) -> int | None:
    """The intra-op threads of all the job's pools: the pool the agent reported, in each of
    its processes that steps a loop (None: no pool reported). Two spawned trainers of torch's
    default pool on 2 cores are 4 threads for 2 cores: the job's own oversubscription, though
    each pool alone is as wide as the cores."""
    size = None if model is None else model.intra_op_threads
    return None if size is None else size * trainers(steps)


def pool_waiting(sched: SchedMeans) -> float:
    """Cores' worth of the job's threads other than the loop's that wait for a CPU: the
    target's other threads, its input workers and its other processes (spawned trainers run
    their pools there), measured."""
    tree, loop = sched.get("tree"), sched.get("loop")
    if tree is None:
        return 0.0
    return max(0.0, tree.cpu_wait - (0.0 if loop is None else loop.cpu_wait))


def oversubscribed_by(
    runnable: float, cores: int, neighbours: Neighbours | None, pool: int | None = None
) -> OversubscribedBy:
    """Whose threads hold the cores a tree's waiting threads want: its own pools (the
    framework's pool wider than its cores where the agent reported it, else more of its threads
    runnable than it has cores), other processes (they keep ``NEIGHBOURS_BUSY`` cores or more
    busy), both, or "unknown" (no scan of the other processes)."""
    # a pool sized to its cores can still show more runnable threads than cores (the framework's
    # inter-op and tf.data threads wake around each op): its size, when known, is the better fact
    own = pool > cores if pool is not None else runnable > cores + 0.5
    if neighbours is None:
        return "own-pool" if own else "unknown"
    others = neighbours.others_cores >= NEIGHBOURS_BUSY
    if own:
        return "both" if others else "own-pool"
    return "neighbours" if others else "unknown"


def cause_text(c: InputCause, cores: int, neighbours: Neighbours | None) -> str:
    """The cause as the headline says it: the producers' split, their cores, the neighbours."""
    busy = f"{min(c.cpu_cores, cores):.1f} of {cores} core{'s' if cores > 1 else ''} busy"
    if c.usable_cores < cores:
        busy += ", serial stage" if c.usable_cores == 1 else f", {c.usable_cores} producers"
    sp = c.split
    if sp is None:
        if c.cause == "cpu":
            return f"CPU-bound preprocessing ({busy})"
        if c.cause == "latency":
            return f"the input stage waits on I/O ({busy})"
        return f"partly CPU, partly I/O ({busy})"
    who = c.producers or "its producers"
    split = (
        f"{who}: on a CPU {sp.on_cpu:.0%}, waiting for a CPU {sp.cpu_wait:.0%}, "
        f"blocked {sp.blocked:.0%} of their time"
    )
    around = "" if neighbours is None else f"; {neighbours.text(cores)}"
    # what other processes take, said beside any cause once it is a core's worth of contention
    more = around if neighbours and neighbours.others_cores >= NEIGHBOURS_BUSY else ""
    if c.cause == "cpu":
        return f"CPU-bound preprocessing ({split}; {busy}){more}"
    if c.cause == "latency":
        return f"the input stage waits on I/O ({split}){more}"
    if c.cause == "contention":
        return f"the input stage waits for a CPU that other processes hold ({split}{around})"
    return f"partly CPU, partly I/O ({split})"
