"""The input stage's headroom: what the baseline run says about its input bottleneck
(``diagnose``), how fast that input stage could go on this machine (``headroom``: the
compute-only rate, the cores' CPU, P parallel waits), and the measured parallelism search for
input that waits (``search_parallelism``). ``sofa_top.optimizers.compare`` runs the
configurations; this module holds the model it reads them with.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sofa_top.optimizers.compare import ConfigResult, RunOutcome


def _median(vals: Sequence[float]) -> float | None:
    return statistics.median(vals) if vals else None


@dataclass
class InputStats:
    """One run's steady steps, as the headroom model needs them (seconds per step)."""

    compute_s: float  # median(step duration - input wait)
    input_s: float  # median input wait
    step_s: float  # median step duration
    cpu_per_step_s: float | None  # tree CPU-seconds over the measured window / steps
    cores_busy: float | None = None  # the tree's mean cores busy over the window
    others_cores: float | None = None  # cores busy with other processes, on the usable ones


@dataclass
class Diagnosis:
    """The baseline's input bottleneck: its cause and the numbers the headroom model uses."""

    cause: str | None  # cpu / latency / mixed (the verdict's evidence), None: not input-bound
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

    def bounds(
        self,
        parallelism: int | None,
        cpu_per_step_s: float | None = None,
        free_cores: float | None = None,
    ) -> dict[str, float]:
        """Upper bounds on steps/s: compute-only, the cores' CPU, and P parallel waits.

        ``cpu_per_step_s``: a configuration's own CPU cost per step, instead of the
        baseline's; ``free_cores``: the cores left by other processes, instead of all."""
        out: dict[str, float] = {}
        cpu = cpu_per_step_s or self.cpu_per_step_s
        if self.compute_s and self.compute_s > 0:
            out["compute"] = 1.0 / self.compute_s
        if cpu and cpu > 0:
            out["cores"] = (free_cores or self.cores) / cpu
        if self.cause in ("latency", "mixed") and self.input_s and self.input_s > 0:
            out["latency"] = (parallelism or 1) / self.input_s
        return out


def diagnosis_json(d: Diagnosis | None) -> dict[str, Any] | None:
    if d is None:
        return None
    out = asdict(d)
    bounds = d.bounds(d.input_parallelism)
    out["bounds"] = {
        "compute_steps_s": bounds.get("compute"),
        "cores_steps_s": bounds.get("cores"),
        "latency_steps_s_per_parallel": (1.0 / d.input_s) if d.input_s else None,
    }
    return out


def affinity() -> list[int]:
    """The CPU numbers this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which the workload inherits."""
    return len(affinity())


def tree_memory(pid: int) -> int | None:
    """Proportional set size (PSS) of ``pid`` and its descendants, in bytes.

    PSS, not RSS: forked DataLoader workers share most of their pages with the parent, and a
    sum of RSS counts those once per worker (16 workers: ~13x the baseline's RSS for ~1.3x the
    memory actually used). Falls back to RSS where PSS cannot be read."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            info = p.memory_full_info()
            total += int(getattr(info, "pss", 0) or info.rss)
        except psutil.AccessDenied:
            with contextlib.suppress(psutil.Error):
                total += int(p.memory_info().rss)
        except psutil.Error:
            pass  # exited meanwhile
    return total or None


def _cores_busy(
    points: list[tuple[float, float | None, str | None]], t0: float, t1: float
) -> float | None:
    """Mean cores busy over [t0, t1] from ``tree.cpu`` (% of one core; each point is the mean
    since the previous one), weighted by overlap; the nearest point when none overlaps."""
    busy = weight = 0.0
    prev: float | None = None
    for ts, v, _err in points:
        if prev is not None and v is not None:
            overlap = min(ts, t1) - max(prev, t0)
            if overlap > 0:
                busy += v / 100.0 * overlap
                weight += overlap
        prev = ts
    if weight > 0:
        return busy / weight
    near = [(abs(ts - t1), v) for ts, v, _ in points if v is not None and ts >= t0]
    return min(near)[1] / 100.0 if near else None


Points = list[tuple[float, float | None, str | None]]


def input_stats(
    steady: Sequence[Any], cpu_points: Points, core_points: Sequence[Points] = ()
) -> InputStats | None:
    """The headroom model's numbers from a run's measured steps, its ``tree.cpu`` series and
    the ``sys.cpu.<i>`` series of the cores it may use (``core_points``)."""
    if not steady:
        return None
    compute = statistics.median(max(0.0, s.duration_s - s.input_wait_s) for s in steady)
    t0, t1 = steady[0].start, steady[-1].ts
    busy = _cores_busy(cpu_points, t0, t1) if t1 > t0 else None
    others: float | None = None
    per_core = [_cores_busy(p, t0, t1) for p in core_points] if t1 > t0 else []
    if busy is not None and per_core and all(c is not None for c in per_core):
        # what the machine's other processes (sofa-top included) took from the same cores
        others = max(0.0, sum(c or 0.0 for c in per_core) - busy)
    return InputStats(
        compute_s=compute,
        input_s=statistics.median(s.input_wait_s for s in steady),
        step_s=statistics.median(s.duration_s for s in steady),
        cpu_per_step_s=None if busy is None else busy * (t1 - t0) / len(steady),
        cores_busy=busy,
        others_cores=others,
    )


def parallelism_setting(optimize: dict[str, Any]) -> int | None:
    """The ``parallelism`` a configuration's prefetch toggle asks for, else None."""
    pre = optimize.get("prefetch")
    if isinstance(pre, dict):
        n = pre.get("parallelism")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def diagnose(baseline: Sequence[RunOutcome], cores: int) -> Diagnosis | None:
    """The input bottleneck of the baseline runs: the first run's cause (what the search went
    by), the medians of their numbers."""
    ok = [o for o in baseline if o.input is not None and not o.failed]
    if not ok:
        return None
    ev = ok[0].evidence
    cause = ev.get("input_cause") if ok[0].verdict == "input-bound" else None
    p0 = ev.get("input_parallelism")
    p0 = p0 if isinstance(p0, int) and not isinstance(p0, bool) and p0 > 0 else None
    stats = [o.input for o in ok if o.input is not None]
    wait = statistics.median(x.input_s for x in stats)
    step = statistics.median(x.step_s for x in stats)

    def num(key: str) -> float | None:
        v = ev.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def med(vals: Sequence[float | int | None]) -> float | None:
        return _median([float(v) for v in vals if v is not None])

    mem, rss = med([o.memory for o in ok]), med([o.rss for o in ok])
    others = med([x.others_cores for x in stats])
    return Diagnosis(
        cause=cause if cause in ("cpu", "latency", "mixed") else None,
        input_fraction=num("input_fraction"),
        input_cpu_cores=num("input_cpu_cores"),
        input_parallelism=p0,
        cores=cores,
        compute_s=statistics.median(x.compute_s for x in stats),
        # p0 parallel producers fill one step's wait: each item takes p0 x the step
        input_s=wait if p0 is None or p0 <= 1 else p0 * step,
        cpu_per_step_s=med([x.cpu_per_step_s for x in stats]),
        batch_size=med([o.batch_size for o in ok]),
        memory=None if mem is None else int(mem),
        rss=None if rss is None else int(rss),
        others_cores=others,
    )


_BOUND_TEXT = {
    "compute": "the compute-only rate (no input wait)",
    "cores": "what {cores} cores allow",
    "latency": "what parallelism {p} allows",
}


def headroom(cr: ConfigResult, diag: Diagnosis | None) -> dict[str, Any]:
    """The best throughput the baseline's numbers say this configuration's input stage can
    reach on this machine, in the run's unit, and the fraction of it the run reached.

    The bounds are the baseline's (``Diagnosis.bounds``) except the CPU cost per step, which is
    the configuration's own where measured: parallel input costs more CPU per step than serial
    (IPC and pickling between DataLoader workers, tf.data's thread hand-offs, cores shared by
    SMT siblings; 8.6 vs 12.3 ms per step measured for ``input_shapes_torch.py --shape cpu``),
    and the baseline's cost would promise throughput that no setting reaches. Likewise the cores
    are those other processes left free during the configuration's runs (``others_cores``, from
    the per-core ``sys.cpu.<i>`` series): on a shared machine they are all it can have."""
    unit = cr.throughput.get("unit", "steps/s")
    p = cr.parallelism
    if p is None and diag is not None:
        # AUTOTUNE / default workers: about the core count; untouched: the baseline's own
        p = diag.cores if "prefetch" in cr.applied else (diag.input_parallelism or 1)
    stats = [o.input for o in cr.outcomes if o.input is not None]
    cpu = _median([x.cpu_per_step_s for x in stats if x.cpu_per_step_s])
    others = _median([x.others_cores for x in stats if x.others_cores is not None])
    busy = _median([x.cores_busy for x in stats if x.cores_busy is not None])
    free: float | None = None
    if diag is not None and others is not None:
        # never fewer than the tree itself got, nor than an equal share next to the others'
        # load: on a machine the others keep busy, a tree that mostly waits (storage, network)
        # gets little CPU because it asks for little, and what it got is no bound on it (the
        # scheduler shares the cores with whoever asks)
        fair = diag.cores / (1.0 + others)
        free = min(float(diag.cores), max(diag.cores - others, busy or 0.0, fair))
    out: dict[str, Any] = {
        "throughput": None,
        "fraction_reached": None,
        "unit": unit,
        "bound": None,
        "cores": diag.cores if diag else None,
        "parallelism": p,
        "free_cores": free,
        "cpu_per_step_s": cpu or (diag.cpu_per_step_s if diag else None),
        "text": None,
    }
    bounds = diag.bounds(p, cpu, free) if diag is not None else {}
    if not bounds or diag is None:
        return out
    bound, rate = min(bounds.items(), key=lambda kv: kv[1])
    if unit == "samples/s":
        bs = _median([o.batch_size for o in cr.outcomes if o.batch_size]) or diag.batch_size
        if not bs:
            return out
        rate *= bs
    out["throughput"] = rate
    out["bound"] = bound
    med = cr.throughput.get("median")
    if med is not None and rate > 0:
        frac = med / rate
        out["fraction_reached"] = frac
        what = _BOUND_TEXT[bound].format(cores=diag.cores, p=p)
        if bound == "cores" and free is not None and diag.cores - free >= 0.05:
            what += f" ({diag.cores - free:.1f} of them busy elsewhere)"
        out["text"] = f"at {frac:.0%} of {what}"
    return out


def headroom_short(cr: ConfigResult) -> str:
    """``96% of 2 cores``, ``76% of P=16``, ``95% of compute``, or ``-``: for narrow tables."""
    h = cr.headroom
    frac, bound = h.get("fraction_reached"), h.get("bound")
    if frac is None or bound is None:
        return "-"
    what = {"cores": f"{h.get('cores')} cores", "latency": f"P={h.get('parallelism')}"}
    return f"{frac:.0%} of {what.get(bound, bound)}"


def headroom_line(cr: ConfigResult) -> str:
    """``1.38x — at 96% of what 2 cores allow``: speedup and headroom in one line."""
    sp = "-" if cr.speedup is None else f"{cr.speedup:.2f}x"
    text = cr.headroom.get("text")
    return f"{sp} — {text}" if text else sp


SEARCH_LEVELS = 5  # parallelism levels tried at most: cores x 1, 2, 4, 8, 16
SEARCH_GAIN = 1.10  # a level must beat the best so far by 10% for the search to go on
SEARCH_MEMORY_GROWTH = 2.0  # stop when the tree's memory passes this multiple of baseline's
SEARCH_MEMORY_SHARE = 0.5  # ... or the next level would pass this share of the machine's RAM


def ram_total() -> int | None:
    """The machine's RAM in bytes (None when psutil cannot say)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def wants_search(optimize: dict[str, Any]) -> bool:
    pre = optimize.get("prefetch")
    return pre is True or (isinstance(pre, dict) and parallelism_setting(optimize) is None)


def with_parallelism(optimize: dict[str, Any], n: int) -> dict[str, Any]:
    pre = optimize.get("prefetch")
    opts = dict(pre) if isinstance(pre, dict) else {}
    return {**optimize, "prefetch": {**opts, "parallelism": n}}


def search_parallelism(
    diag: Diagnosis,
    measure: Callable[[int], RunOutcome],
    ram: int | None = None,
    levels_max: int = SEARCH_LEVELS,
) -> dict[str, Any]:
    """Pick the prefetch parallelism from the baseline's diagnosis.

    cpu-bound input stays at the core count (more producers only share the same cores). For
    input that waits (latency, mixed), ``measure`` runs the prefetch configuration at cores x
    1, 2, 4, ... and the search stops when a level is less than ``SEARCH_GAIN`` better than the
    best so far, when the tree's memory passes ``SEARCH_MEMORY_GROWTH`` x the baseline's, or
    when the next level's projected memory would pass ``SEARCH_MEMORY_SHARE`` of ``ram``.
    Returns the ``search`` object of ``compare --json``."""
    levels: list[dict[str, Any]] = []
    out: dict[str, Any] = {"cause": diag.cause, "levels": levels, "chosen": None, "stop": None}
    if diag.cause == "cpu":
        out["chosen"] = diag.cores
        out["stop"] = "cpu-bound input: parallelism stays at the core count"
        return out
    if diag.cause not in ("latency", "mixed"):
        out["stop"] = "baseline not input-bound: no search (prefetch defaults)"
        return out
    best_p: int | None = None
    best_rate = 0.0
    last: tuple[int, int] | None = None  # (parallelism, memory) of the last level measured
    stop = "largest level reached"
    for k in range(levels_max):
        p = diag.cores * 2**k
        if ram and diag.memory and last is not None:
            # memory grows about linearly with the producers (workers, threads, buffers)
            projected = diag.memory + (last[1] - diag.memory) * p / last[0]
            if projected > SEARCH_MEMORY_SHARE * ram:
                stop = f"parallelism {p} would take over half the RAM"
                break
        o = measure(p)
        levels.append(
            {
                "parallelism": p,
                "throughput": o.rate,
                "unit": o.unit,
                "memory": o.memory,
                "rss": o.rss,
                "applied": "prefetch" in o.applied,
                "failed": o.failed,
            }
        )
        if o.failed or o.rate is None or o.nonfinite_loss:
            stop = f"parallelism {p}: " + (o.failed or "no throughput / non-finite loss")
            break
        if "prefetch" not in o.applied:
            stop = "the prefetch toggle did not apply: parallelism changes nothing"
            break
        if diag.memory and o.memory and o.memory > SEARCH_MEMORY_GROWTH * diag.memory:
            stop = f"parallelism {p}: memory {o.memory / diag.memory:.1f}x the baseline's"
            break
        if o.memory is not None:
            last = (p, o.memory)
        if best_p is not None and o.rate < SEARCH_GAIN * best_rate:
            stop = f"parallelism {p}: less than {SEARCH_GAIN - 1:.0%} better than {best_p}"
            break
        best_p, best_rate = p, o.rate
    out["chosen"] = best_p
    out["stop"] = stop
    return out
