"""The input stage's headroom: what the baseline runs say about its input bottleneck
(``diagnose``) and how fast that input stage could go on this machine (``headroom``: the
compute-only rate, the cores' CPU, P parallel waits). ``sofa_top.optimizers.compare`` runs the
configurations; this module holds the model it reads them with.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.verdict_evidence import ProcessEvidence
from sofa_top.optimizers.measures import RunOutcome, Throughput, Unit, median

Bound = Literal["compute", "cores", "latency", "serial-source"]
NOTHING_TO_WIN = 1.05  # a bound within 5% of the baseline's own rate leaves nothing to win
BOUND_SLACK = 1.02  # a run up to 2% above a bound is noise; past it, the bound did not hold
InputCauseName = Literal["cpu", "latency", "mixed", "contention"]


@dataclass(frozen=True)
class Diagnosis:
    """The baseline's input bottleneck: its cause and the numbers the headroom model uses."""

    cause: InputCauseName | None  # the verdict's input cause; None: not input-bound
    input_fraction: float | None
    input_cpu_cores: float | None
    input_parallelism: int | None  # p0: the baseline's own input parallelism
    cores: int
    compute_s: float | None
    input_s: float | None  # input time per step: median wait (serial), else p0 x median step
    cpu_per_step_s: float | None
    batch_size: float | None
    memory: int | None
    rss: int | None
    others_cores: float | None = None  # cores other processes kept busy meanwhile
    step_s: float | None = None  # the baseline's median step
    wait_s: float | None = None  # the baseline's median input wait per step (part of step_s)
    serial_source: str | None = None  # a source stage no toggle parallelizes
    serial_s: float | None = None  # its time per step (measured, else the input wait)

    def bounds(
        self,
        parallelism: int | None,
        cpu_per_step_s: float | None = None,
        free_cores: float | None = None,
    ) -> dict[Bound, float]:
        """Upper bounds on steps/s: compute-only, the cores' CPU, P parallel waits, and a
        serial source that no toggle parallelizes (overlapped at best: one source time per
        step).

        ``cpu_per_step_s``: a configuration's own CPU cost per step, instead of the
        baseline's; ``free_cores``: the cores left by other processes, instead of all."""
        out: dict[Bound, float] = {}
        cpu = cpu_per_step_s or self.cpu_per_step_s
        if self.compute_s and self.compute_s > 0:
            out["compute"] = 1.0 / self.compute_s
        if cpu and cpu > 0:
            out["cores"] = (free_cores or self.cores) / cpu
        if self.cause in ("latency", "mixed") and self.input_s and self.input_s > 0:
            out["latency"] = (parallelism or 1) / self.input_s
        if self.serial_source and self.serial_s and self.serial_s > 0:
            out["serial-source"] = 1.0 / self.serial_s
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``diagnosis`` object of ``compare --json``."""
        out = asdict(self)
        bounds = self.bounds(self.input_parallelism)
        out["bounds"] = {
            "compute_steps_s": bounds.get("compute"),
            "cores_steps_s": bounds.get("cores"),
            "latency_steps_s_per_parallel": (1.0 / self.input_s) if self.input_s else None,
        }
        return out


@dataclass(frozen=True)
class Headroom:
    """The best throughput a configuration's input stage can reach here, and how close it came."""

    throughput: float | None  # best reachable, in ``unit``
    fraction_reached: float | None  # the configuration's median / ``throughput``
    unit: Unit
    bound: Bound | None  # the binding one
    cores: int | None
    parallelism: int | None  # P used by the latency bound
    free_cores: float | None  # cores less other processes' use
    cpu_per_step_s: float | None  # CPU cost used by the cores bound
    text: str | None  # "at 96% of what 2 cores allow"

    @classmethod
    def unknown(cls, unit: Unit) -> Headroom:
        """Nothing to go by (no baseline diagnosis, or no batch size for samples/s)."""
        return cls(None, None, unit, None, None, None, None, None, None)


def _cause(value: object) -> InputCauseName | None:
    return one_of(value, get_args(InputCauseName))


def _float(v: float | None) -> float | None:
    return None if v is None else float(v)


def diagnose(baseline: Sequence[RunOutcome], cores: int) -> Diagnosis | None:
    """The input bottleneck of the baseline runs: the first run's cause (what the search went
    by), the medians of their numbers."""
    ok = [o for o in baseline if o.input is not None and not o.failed]
    if not ok:
        return None
    ev = ok[0].evidence
    found = ev if isinstance(ev, ProcessEvidence) else None
    figures = found.input_cause if found is not None else None
    cause = None
    if figures is not None and ok[0].verdict == "input-bound":
        cause = _cause(figures.cause)
    p0 = figures.parallelism if figures is not None else None
    p0 = p0 if p0 is not None and p0 > 0 else None
    stats = [o.input for o in ok if o.input is not None]
    wait = statistics.median(x.input_s for x in stats)
    step = statistics.median(x.step_s for x in stats)

    def med(vals: Sequence[float | int | None]) -> float | None:
        return median([float(v) for v in vals if v is not None])

    mem, rss = med([o.memory for o in ok]), med([o.rss for o in ok])
    serial = ok[0].serial_source
    # measured per step when the agent timed the stage; else the whole input wait is the source
    serial_s = med([o.serial_s_per_step for o in ok]) or (wait if serial else None)
    return Diagnosis(
        cause=cause,
        input_fraction=_float(found.input_fraction if found is not None else None),
        input_cpu_cores=_float(figures.cpu_cores if figures is not None else None),
        input_parallelism=p0,
        cores=cores,
        compute_s=statistics.median(x.compute_s for x in stats),
        # p0 parallel producers fill one step's wait: each item takes p0 x the step
        input_s=wait if p0 is None or p0 <= 1 else p0 * step,
        cpu_per_step_s=med([x.cpu_per_step_s for x in stats]),
        batch_size=med([o.batch_size for o in ok]),
        memory=None if mem is None else int(mem),
        rss=None if rss is None else int(rss),
        others_cores=med([x.others_cores for x in stats]),
        step_s=step,
        wait_s=wait,
        serial_source=serial,
        serial_s=serial_s,
    )


_BOUND_TEXT: dict[Bound, str] = {
    "compute": "the compute-only rate (no input wait)",
    "cores": "what {cores} cores allow",
    "latency": "what parallelism {p} allows",
    "serial-source": "what the serial source {source} allows",
}


def headroom(
    outcomes: Sequence[RunOutcome],
    throughput: Throughput,
    parallelism: int | None,
    prefetch_applied: bool,
    diag: Diagnosis | None,
    compute_changed: bool = False,
) -> Headroom:
    """The best throughput the baseline's numbers say this configuration's input stage can
    reach on this machine, in the run's unit, and the fraction of it the run reached.

    The bounds are the baseline's (``Diagnosis.bounds``) except the CPU cost per step, which is
    the configuration's own where measured: parallel input costs more CPU per step than serial
    (IPC and pickling between DataLoader workers, tf.data's thread hand-offs, cores shared by
    SMT siblings; 8.6 vs 12.3 ms per step measured for ``input_shapes_torch.py --shape cpu``),
    and the baseline's cost would promise throughput that no setting reaches. Likewise the cores
    are those other processes left free during the configuration's runs (``others_cores``, from
    the per-core ``sys.cpu.<i>`` series): on a shared machine they are all it can have."""
    unit = throughput.unit
    if diag is None:
        return Headroom.unknown(unit)
    p = parallelism
    if p is None:
        # AUTOTUNE / default workers: about the core count; untouched: the baseline's own
        p = diag.cores if prefetch_applied else (diag.input_parallelism or 1)
    stats = [o.input for o in outcomes if o.input is not None]
    cpu = median([x.cpu_per_step_s for x in stats if x.cpu_per_step_s])
    others = median([x.others_cores for x in stats if x.others_cores is not None])
    busy = median([x.cores_busy for x in stats if x.cores_busy is not None])
    free: float | None = None
    if others is not None:
        # never fewer than the tree itself got, nor than an equal share next to the others'
        # load: on a machine the others keep busy, a tree that mostly waits (storage, network)
        # gets little CPU because it asks for little, and what it got is no bound on it (the
        # scheduler shares the cores with whoever asks)
        fair = diag.cores / (1.0 + others)
        free = min(float(diag.cores), max(diag.cores - others, busy or 0.0, fair))
    cpu_per_step = cpu or diag.cpu_per_step_s
    bounds = diag.bounds(p, cpu, free)
    if compute_changed:
        # XLA, depth-first and thread counts change the compute itself: the baseline's
        # compute-only rate bounds nothing for them
        bounds.pop("compute", None)
    none = Headroom(None, None, unit, None, diag.cores, p, free, cpu_per_step, None)
    scale = 1.0
    if unit == "samples/s":
        bs = median([o.batch_size for o in outcomes if o.batch_size]) or diag.batch_size
        if not bs:
            return none
        scale = bs
    if throughput.median is not None:
        # a bound the runs beat was no bound (the model's estimate was off): never say "at 126%
        # of what 2 cores allow"
        bounds = {b: r for b, r in bounds.items() if throughput.median <= BOUND_SLACK * r * scale}
    if not bounds:
        return none
    bound, rate = min(bounds.items(), key=lambda kv: kv[1])
    rate *= scale
    frac = text = None
    if throughput.median is not None and rate > 0:
        frac = min(1.0, throughput.median / rate)
        what = _BOUND_TEXT[bound].format(cores=diag.cores, p=p, source=diag.serial_source)
        if bound == "cores" and free is not None and diag.cores - free >= 0.05:
            what += f" ({diag.cores - free:.1f} of them busy elsewhere)"
        text = f"at {frac:.0%} of {what}"
        if (
            bound == "serial-source"
            and diag.step_s
            and bounds[bound] <= NOTHING_TO_WIN / diag.step_s
        ):
            # the source caps the pipeline where the baseline already is: no toggle moves it
            text += f"; nothing left to win without changing {diag.serial_source}"
    return Headroom(rate, frac, unit, bound, diag.cores, p, free, cpu_per_step, text)


def headroom_short(h: Headroom) -> str:
    """``96% of 2 cores``, ``76% of P=16``, ``95% of compute``, or ``-``: for narrow tables."""
    if h.fraction_reached is None or h.bound is None:
        return "-"
    what = {
        "cores": f"{h.cores} cores",
        "latency": f"P={h.parallelism}",
        "serial-source": "the serial source",
    }
    return f"{h.fraction_reached:.0%} of {what.get(h.bound, h.bound)}"


def headroom_line(speedup: float | None, h: Headroom) -> str:
    """``1.38x — at 96% of what 2 cores allow``: speedup and headroom in one line."""
    sp = "-" if speedup is None else f"{speedup:.2f}x"
    return f"{sp} — {h.text}" if h.text else sp
