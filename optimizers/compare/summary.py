"""Summarize a configuration's repeats, pick the winner and say which code change keeps it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from sofa_top.agent.toggles import NUMERICS_CHANGING, XLA_FLAGS, Toggle
from sofa_top.optimizers.compare.results import CompareResult, ConfigResult, Flag
from sofa_top.optimizers.headroom import Diagnosis, headroom
from sofa_top.optimizers.measures import Throughput, median


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
    if cr.config != "baseline" and cr.speedup is not None and cr.speedup < 1.0:
        flags.append("slower-than-baseline")
    if any(o.nonfinite_loss for o in cr.outcomes):
        flags.append("non-finite-loss")
    if any(o.failed for o in cr.outcomes):
        flags.append("run-failed")
    if any(t in NUMERICS_CHANGING for t in cr.applied):
        flags.append("numerics-changing")
        if _loss_differs(cr, baseline_loss):
            flags.append("loss-differs")
    return flags


def summarize(
    cr: ConfigResult,
    baseline: float | None,
    diag: Diagnosis | None,
    baseline_loss: float | None = None,
) -> None:
    """Fill ``cr``'s summary fields from its outcomes (``baseline``: the baseline's median
    throughput; ``baseline_loss``: its median logged loss)."""
    outs = cr.outcomes
    cr.throughput = Throughput.of(outs)
    cr.compile_s = median([o.compile_s for o in outs if o.compile_s is not None])
    cr.verdict = next((o.verdict for o in reversed(outs) if o.verdict), None)
    cr.sessions = [o.session for o in outs]
    cr.applied, cr.not_applied = _toggles(cr)
    cr.where = sorted({w for o in outs for w in o.where})
    cr.errors = [f"{Path(o.session).name}: {o.failed}" for o in outs if o.failed]
    med = cr.throughput.median
    cr.speedup = med / baseline if baseline and med is not None else None
    cr.loss = median([o.loss for o in outs if o.loss is not None])
    cr.flags = _flags(cr, baseline_loss)
    cr.parallelism = cr.optimize.parallelism
    cr.headroom = headroom(outs, cr.throughput, cr.parallelism, "prefetch" in cr.applied, diag)


def best_config(runs: Sequence[ConfigResult]) -> str | None:
    """The fastest configuration whose runs neither failed, nor produced a non-finite loss, nor
    changed the loss beyond the tolerance."""
    ok = [
        r
        for r in runs
        if r.throughput.median is not None
        and "run-failed" not in r.flags
        and "non-finite-loss" not in r.flags
        and "loss-differs" not in r.flags
    ]
    return max(ok, key=lambda r: r.throughput.median or 0.0).config if ok else None


def changes_for(result: CompareResult, config: str | None) -> list[str]:
    """The code changes that reproduce what the agent did in ``config``."""
    cr = result.run(config)
    if cr is None:
        return []
    out: list[str] = []
    where = " ".join(cr.where)
    if "prefetch" in cr.applied:
        out += _prefetch_changes(where, cr.parallelism)
    if "xla" in cr.applied:
        if "tensorflow" in where:
            out.append(
                "TF: `tf.config.optimizer.set_jit('autoclustering')` (or env "
                f"TF_XLA_FLAGS='{XLA_FLAGS}'); `@tf.function(jit_compile=True)` on the step"
            )
        if "keras" in where:
            out.append("Keras: `model.compile(..., jit_compile=True)`")
        if "torch:" in where:
            out.append("PyTorch: `model.compile()` (torch.compile in place) before the loop")
    if "depth_first" in cr.applied:
        out.append("PyTorch: `model = sofa_top.optimizers.depth_first(model)`")
    out += _gpu_changes(cr, where)
    return out


def _gpu_changes(cr: ConfigResult, where: str) -> list[str]:
    out: list[str] = []
    if "pin_memory" in cr.applied:
        out.append(
            "PyTorch: `DataLoader(..., pin_memory=True)` and `batch.to(device, non_blocking=True)`"
        )
    if "bf16" in cr.applied:
        out.append(
            "PyTorch: `with torch.autocast('cuda', dtype=torch.bfloat16):` around the forward "
            "pass and the loss (numerics change: check the loss and the metrics)"
        )
    m = re.search(r"compile\(mode='([^']+)'\)", where)
    if "compile_mode" in cr.applied and m:
        out.append(f"PyTorch: `model.compile(mode='{m.group(1)}')` before the loop")
    return out


def _prefetch_changes(where: str, n: int | None) -> list[str]:
    out: list[str] = []
    if "tf.data" in where and n is None:
        out.append(
            "tf.data: `ds.map(f, num_parallel_calls=tf.data.AUTOTUNE)` (same for "
            "interleave) and add `.prefetch(tf.data.AUTOTUNE)` after `.batch(...)`"
        )
    elif "tf.data" in where:
        out.append(
            f"tf.data: `ds.map(f, num_parallel_calls={n})` (same for interleave), add "
            "`.prefetch(tf.data.AUTOTUNE)` after `.batch(...)`, and "
            f"`options.threading.private_threadpool_size = {n}` "
            "(`ds = ds.with_options(options)`)"
        )
    m = re.search(r"DataLoader\(([^)]*)\)", where)
    if m:
        out.append(f"PyTorch: `DataLoader(..., {m.group(1)})`")
    return out
