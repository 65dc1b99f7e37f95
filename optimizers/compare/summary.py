"""Summarize a configuration's repeats, pick the winner and say which code change keeps it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from sofa_top.agent.toggles import (
    BF16,
    COMPILE_MODE,
    DEPTH_FIRST,
    PIN_MEMORY,
    PREFETCH,
    THREADS,
    XLA,
    XLA_FLAGS,
    Toggle,
    numerics_changing,
    row_of,
    toggle_of,
)
from sofa_top.datamodel.verdict import Measured
from sofa_top.optimizers.advice.inputs import SHARD_RECIPE
from sofa_top.optimizers.compare.datastream import compare_streams
from sofa_top.optimizers.compare.results import CompareResult, ConfigResult, Flag
from sofa_top.optimizers.headroom import Diagnosis, headroom
from sofa_top.optimizers.measures import DataStream, Throughput, median, median_interval

# The code change that lets a toggle apply, per obstacle the agent reports (``blocked``).
UNBLOCK: dict[str, str] = {
    "unsharded-iterable": (
        f"PyTorch: the IterableDataset feeds every DataLoader worker the whole stream: "
        f"{SHARD_RECIPE}; then DataLoader(num_workers=N) reads each sample once"
    ),
}


def data_change(run: DataStream | None, base: DataStream | None) -> str | None:
    """How ``run``'s data stream differs from the baseline's (None: no difference seen, or
    nothing to compare): ``datastream.compare_streams``."""
    return compare_streams(run, base).change


def _toggles(cr: ConfigResult) -> tuple[list[Toggle], list[tuple[Toggle, str]]]:
    """Toggles that applied in any repeat, and the first reason for each that never did."""
    wanted = list(cr.optimize.toggles())
    applied = {t for o in cr.outcomes for t in o.applied}
    reasons: dict[Toggle, str] = {}
    for o in cr.outcomes:
        for t, r in o.not_applied:
            if t not in applied and t in wanted:
                reasons.setdefault(t, r)
    return (
        [t for t in wanted if t in applied],
        [(t, reasons.get(t, "not reported")) for t in wanted if t not in applied],
    )


# a numerics-changing toggle whose logged loss is this far (relative) off the baseline's
LOSS_TOLERANCE = 0.10


def _loss_differs(cr: ConfigResult, baseline_loss: float | None) -> bool:
    if cr.loss is None or baseline_loss is None:
        return False
    return abs(cr.loss - baseline_loss) > LOSS_TOLERANCE * max(abs(baseline_loss), 1e-6)


def _flags(cr: ConfigResult, baseline_loss: float | None = None) -> list[Flag]:
    flags: list[Flag] = []
    if cr.not_applied:
        flags.append("toggle-not-applied")
    slow_partial = cr.partial and cr.speedup is not None and cr.speedup < 1.0
    if cr.effect == "slower" or slow_partial:
        flags.append("slower")
    if any(o.nonfinite_loss for o in cr.outcomes):
        flags.append("non-finite-loss")
    if any(o.failed for o in cr.outcomes):
        flags.append("run-failed")
    if numerics_changing(cr.applied):
        flags.append("numerics-changing")
        if _loss_differs(cr, baseline_loss):
            flags.append("loss-differs")
    if cr.data_change is not None:
        flags.append("data-changed")
    return flags


# Runs each side needs before a difference is called clear: with 3 and 3, intervals that do
# not overlap (every run of one beats every run of the other) happen by chance 1 time in 20 in
# each direction (the Mann-Whitney test's exact p = 0.05); with 2 and 2, 1 time in 6
MIN_RUNS_CLEAR = 3


def effect(mine: Sequence[float], base: Sequence[float]) -> Literal["faster", "slower", "unclear"]:
    """A configuration's runs against the baseline's: its median's interval clear of the
    baseline's above or below, or overlapping it (or too few runs to tell)."""
    if min(len(mine), len(base)) < MIN_RUNS_CLEAR:
        return "unclear"
    a, b = median_interval(mine), median_interval(base)
    if a is None or b is None:
        return "unclear"
    if a[0] > b[1]:
        return "faster"
    if a[1] < b[0]:
        return "slower"
    return "unclear"


def rates(cr: ConfigResult) -> list[float]:
    """The throughput of each of ``cr``'s runs that measured one."""
    return [o.rate for o in cr.outcomes if o.rate is not None]


def nothing_applied(cr: ConfigResult) -> bool:
    """A configuration none of whose toggles changed anything: timing it times the baseline."""
    wanted = cr.optimize.toggles()
    return bool(wanted) and bool(cr.outcomes) and not any(o.applied for o in cr.outcomes)


def summarize(
    cr: ConfigResult,
    baseline: float | None,
    diag: Diagnosis | None,
    baseline_loss: float | None = None,
    base_data: DataStream | None = None,
    base_rates: Sequence[float] = (),
) -> None:
    """Fill ``cr``'s summary fields from its outcomes (``baseline``: the baseline's median
    throughput and ``base_rates`` its runs'; ``baseline_loss``: its median logged loss;
    ``base_data``: the data stream its first run was fed)."""
    outs = cr.outcomes
    cr.throughput = Throughput.of(outs)
    cr.compile_s = median([o.compile_s for o in outs if o.compile_s is not None])
    cr.verdict = next((o.verdict for o in reversed(outs) if o.verdict), None)
    cr.sessions = [o.session for o in outs]
    cr.applied, cr.not_applied = _toggles(cr)
    cr.where = sorted({w for o in outs for w in o.where})
    cr.errors = [f"{Path(o.session).name}: {o.failed}" for o in outs if o.failed]
    cr.partial = any(o.partial for o in outs)
    cr.interval = median_interval(rates(cr))
    med = cr.throughput.median
    if cr.config != "baseline":
        checks = [compare_streams(o.data, base_data) for o in outs]
        cr.data_change = next((c.change for c in checks if c.change is not None), None)
        cr.data_compared_batches = max((c.compared for c in checks), default=0) or None
    # a run fed other data is not faster at the same work, and one where nothing applied ran
    # the baseline again: no speedup is reported for either
    comparable = cr.data_change is None and not nothing_applied(cr)
    cr.speedup = med / baseline if baseline and med is not None and comparable else None
    if cr.config != "baseline" and cr.speedup is not None:
        cr.effect = effect(rates(cr), base_rates)
    cr.loss = median([o.loss for o in outs if o.loss is not None])
    cr.flags = _flags(cr, baseline_loss)
    cr.parallelism = cr.optimize.parallelism
    cr.advice = [
        UNBLOCK[k] for k in sorted({k for o in outs for _t, k in o.blocked}) if k in UNBLOCK
    ]
    cr.headroom = headroom(
        outs,
        cr.throughput,
        cr.parallelism,
        PREFETCH in cr.applied,
        diag,
        compute_changed=bool({XLA, DEPTH_FIRST, THREADS} & set(cr.applied)),
    )


def best_config(runs: Sequence[ConfigResult]) -> str | None:
    """The fastest configuration that is clearly faster than the baseline (its interval clear
    above the baseline's) and whose runs neither failed, produced a non-finite loss, changed
    the loss beyond the tolerance, nor were fed another data stream than the baseline's; None
    when no configuration is clearly faster."""
    ok = [
        r
        for r in runs
        if r.effect == "faster"
        and r.throughput.median is not None
        and "run-failed" not in r.flags
        and "non-finite-loss" not in r.flags
        and "loss-differs" not in r.flags
        and "data-changed" not in r.flags
    ]
    return max(ok, key=lambda r: r.throughput.median or 0.0).config if ok else None


def no_best_note(runs: Sequence[ConfigResult]) -> str | None:
    """Why no configuration is named best: each one's spread against the baseline's."""
    base = next((r for r in runs if r.config == "baseline"), None)
    if base is None or base.throughput.median is None:
        return "no baseline throughput to compare with"
    unclear = [r for r in runs if r.effect == "unclear"]
    spread = "; ".join(_spread(r) for r in [base, *unclear])
    if unclear:
        return f"no clear difference at this noise: {spread}"
    return "no configuration is clearly faster than the baseline"


def _spread(r: ConfigResult) -> str:
    tp = r.throughput
    lo, hi = r.interval or (tp.min, tp.max)
    n = len(rates(r))
    return f"{r.config} {tp.median:.4g} ({lo:.4g}-{hi:.4g}, {n} run{'s' if n != 1 else ''})"


def changes_for(result: CompareResult, config: str | None) -> list[str]:
    """The code changes that reproduce what the agent did in ``config``."""
    cr = result.run(config)
    if cr is None:
        return []
    out: list[str] = []
    where = " ".join(cr.where)
    if PREFETCH in cr.applied:
        out += _prefetch_changes(where)
    if XLA in cr.applied:
        if "tensorflow" in where:
            out.append(
                "TF: `tf.config.optimizer.set_jit('autoclustering')` (or env "
                f"TF_XLA_FLAGS='{XLA_FLAGS}'); `@tf.function(jit_compile=True)` on the step"
            )
        if "keras" in where:
            out.append("Keras: `model.compile(..., jit_compile=True)`")
        if "torch:" in where:
            out.append("PyTorch: `model.compile()` (torch.compile in place) before the loop")
    if DEPTH_FIRST in cr.applied:
        out.append("PyTorch: `model = sofa_top.optimizers.depth_first(model)`")
    if THREADS in cr.applied:
        n = cr.optimize.threads
        if "torch:" in where:
            out.append(
                f"PyTorch: `torch.set_num_threads({n})` at the start (or env "
                f"OMP_NUM_THREADS={n}); env OMP_WAIT_POLICY=PASSIVE"
            )
        if "tensorflow:" in where:
            out.append(
                f"TF: `tf.config.threading.set_intra_op_parallelism_threads({n})` and "
                f"`set_inter_op_parallelism_threads({n})` before the first op; env "
                "OMP_WAIT_POLICY=PASSIVE"
            )
    out += _gpu_changes(cr, where)
    # a toggle without wording of its own here: the code change its table row names
    out += [r.change for t in cr.applied if t not in _WORDED and (r := row_of(t)) is not None]
    return out


# the toggles whose code change ``changes_for`` words from where the agent applied them
_WORDED = frozenset({PREFETCH, XLA, DEPTH_FIRST, THREADS, PIN_MEMORY, BF16, COMPILE_MODE})


def _gpu_changes(cr: ConfigResult, where: str) -> list[str]:
    out: list[str] = []
    if PIN_MEMORY in cr.applied:
        out.append(
            "PyTorch: `DataLoader(..., pin_memory=True)` and `batch.to(device, non_blocking=True)`"
        )
    if BF16 in cr.applied:
        out.append(
            "PyTorch: `with torch.autocast('cuda', dtype=torch.bfloat16):` around the forward "
            "pass and the loss (numerics change: check the loss and the metrics)"
        )
    m = re.search(r"compile\(mode='([^']+)'\)", where)
    if COMPILE_MODE in cr.applied and m:
        out.append(f"PyTorch: `model.compile(mode='{m.group(1)}')` before the loop")
    return out


def _prefetch_changes(where: str) -> list[str]:
    """The tf.data, DataLoader and PyDataset changes the agent made (``where``), as code: only
    the stages it changed (a pipeline without a map gets no ``ds.map``)."""
    out: list[str] = []
    tf: list[str] = []
    for stage in ("map", "interleave"):
        calls = re.search(rf"tf\.data: {stage}\(num_parallel_calls=(\w+)\)", where)
        if calls:
            value = "tf.data.AUTOTUNE" if calls.group(1) == "AUTOTUNE" else calls.group(1)
            tf.append(f"`ds.{stage}(f, num_parallel_calls={value})`")
    if ".prefetch(AUTOTUNE) appended" in where:
        tf.append("`ds = ds.prefetch(tf.data.AUTOTUNE)` as the last step")
    pool = re.search(r"private_threadpool_size=(\d+)", where)
    if pool:
        tf.append(
            f"`options.threading.private_threadpool_size = {pool.group(1)}` "
            "(`ds = ds.with_options(options)`)"
        )
    if tf:
        out.append("tf.data: " + ", ".join(tf))
    m = re.search(r"DataLoader\(([^)]*)\)", where)
    if m:
        out.append(f"PyTorch: `DataLoader(..., {m.group(1)})`")
    k = re.search(r"keras: (\S+) PyDataset\(workers=(\d+)\)", where)
    if k:
        out.append(
            f"Keras: `super().__init__(workers={k.group(2)})` in {k.group(1)}.__init__ "
            "(use_multiprocessing=True when __getitem__ is CPU-bound Python)"
        )
    return out


def measured_of(result: CompareResult) -> list[Measured]:
    """What each single-toggle configuration measured against the baseline, as the verdict
    carries it (``datamodel.verdict.Measured``)."""
    out: list[Measured] = []
    base = result.run("baseline")
    bmed = None if base is None else base.throughput.median
    for r in result.runs:
        toggle = toggle_of(r.config)
        if toggle is None or not bmed:
            continue
        if r.not_applied and not r.applied:
            reason = "; ".join(why for _t, why in r.not_applied)
            out.append(Measured(toggle, "not-applied", None, reason=reason))
            continue
        if r.effect is None or r.speedup is None:
            continue
        lo, hi = r.interval or (None, None)
        out.append(
            Measured(
                toggle,
                r.effect,
                r.speedup,  # as compare reports it: the quoted x4.94 is the same number
                None if lo is None else round(lo / bmed, 3),
                None if hi is None else round(hi / bmed, 3),
                r.optimize.parallelism if r.optimize.prefetch is not None else None,
                r.optimize.threads,
                change="; ".join(changes_for(result, r.config)),
            )
        )
    return out
