"""The tuner: whether a run goes depth-first for an input signature, with which chunks.

Tuning
    The chunk size starts from the cache sizes (``optimizers/cache.py``: per-core L2 times
    threads / 2, capped at L3/4; sysfs, falling back to 1 MiB L2 / 32 MiB L3). On the first
    call for each (run, input shape, dtype, train/eval, autograd) a short measurement (about
    1 s per run) compares the original layers with a few chunk sizes, with and without worker
    threads (forward, plus backward when autograd records); a variant must win in both the
    fastest and the median round. BatchNorm buffers and the RNG state are restored after it,
    and it never runs during ``torch.jit``/fx tracing or ``torch.compile`` (the run takes the
    original path there before asking), so tuning cannot change results. A run keeps the
    original path when no variant is ``min_speedup`` times faster; the decision is recorded
    and shown by ``depth_first_report``. ``chunk_bytes=`` forces a size (no tuning).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from sofa_top.optimizers.depth_first.chunked import plan_tile
from sofa_top.optimizers.depth_first.options import Options, Shapes
from sofa_top.optimizers.depth_first.report import ChunkDecision


class Run(Protocol):
    """What the tuner needs of a run (``run.Run``, which calls the tuner, is one)."""

    opts: Options
    bns: list[nn.Module]
    mutates_input: bool

    def unsupported(self, x: Tensor, sides: tuple[Any, ...]) -> str | None: ...

    def shapes_for(self, x: Tensor, sides: tuple[Any, ...]) -> Shapes: ...

    def reference(self, x: Any, *sides: Any) -> Any: ...

    def chunked(
        self,
        x: Tensor,
        sides: tuple[Any, ...],
        shapes: list[tuple[int, ...]],
        tile: tuple[int, int],
        grad: bool,
        workers: int = 0,
    ) -> Tensor: ...

    def params(self) -> Iterator[Tensor]: ...


# Chunk sizes tried, as multiples of the cache-derived size, and timed rounds.
_TUNE_FACTORS = (1.0, 2.0, 0.5, 4.0)
# Chunks in turn with multithreaded layers lost everywhere we measured with worker threads
# available; two sizes of them stay in the running for machines where that differs.
_TUNE_FACTORS_SERIAL = (1.0, 4.0)
_TUNE_ROUNDS = 3
_TUNE_BUDGET_S = 1.0  # per run and input signature; at least one timed round is always done

Variant = tuple[tuple[int, int], int] | None  # (tile, workers); None: the original layers


def decide(
    run: Run, x: Tensor, sides: tuple[Any, ...], grad: bool, batch_stats: bool
) -> ChunkDecision:
    """The decision for ``run`` on inputs like ``x``: measured unless options fix it."""
    why = run.unsupported(x, sides)
    if why is not None:
        return _decision(x, grad, batch_stats, None, None, False, None, why)
    shapes = run.shapes_for(x, sides)
    assert not isinstance(shapes, str)
    opts = run.opts
    batch_split = not batch_stats  # batch statistics need whole batches per chunk
    threads = torch.get_num_threads()
    # Worker threads only without autograd: grad mode, saved-tensor hooks (checkpointing)
    # and anomaly mode are per thread, and the backward would not be split by chunks.
    can_spread = not grad and threads > 1 and opts.parallel_chunks is not False
    spread = threads if can_spread else 0
    if opts.chunk_bytes is not None or not opts.tune:
        target = opts.chunk_bytes or opts.base_bytes
        tile = plan_tile(shapes, x.element_size(), target, batch_split)
        if tile is None:
            return _decision(x, grad, batch_stats, None, target, False, None, "fits in one chunk")
        why = "forced chunk_bytes" if opts.chunk_bytes else "tuning off"
        return _decision(x, grad, batch_stats, (tile, spread), target, True, None, why)
    plans = _candidates(run, shapes, x.element_size(), batch_split, spread)
    if not plans:
        return _decision(
            x, grad, batch_stats, None, opts.base_bytes, False, None, "fits in one chunk"
        )
    times = _measure(run, x, sides, shapes, list(plans), grad)
    plans = {v: plans[v] for v in times if v is not None}
    best, speedup = _best(times, plans)
    if speedup >= opts.min_speedup:
        return _decision(x, grad, batch_stats, best, plans[best], True, speedup, "measured faster")
    why = "chunking not faster: original kept"
    return _decision(x, grad, batch_stats, best, plans[best], False, speedup, why)


def _decision(
    x: Tensor,
    grad: bool,
    batch_stats: bool,
    variant: Variant,
    chunk: int | None,
    chunked: bool,
    speedup: float | None,
    reason: str,
) -> ChunkDecision:
    split, tile, workers = "none", None, 0
    if variant is not None:
        tile, workers = variant
    if tile is not None and chunked:
        parts = []
        if tile[0] < x.shape[0]:
            parts.append("batch")
        if tile[1] < x.shape[1]:
            parts.append("channels")
        split = "+".join(parts)
    return ChunkDecision(
        shape=tuple(x.shape),
        dtype=str(x.dtype).removeprefix("torch."),
        mode="train" if batch_stats else "eval",
        grad=grad,
        split=split,
        tile=tile,
        workers=workers,
        chunk_bytes=chunk,
        chunked=chunked,
        speedup=speedup,
        reason=reason,
    )


def _candidates(
    run: Run, shapes: list[tuple[int, ...]], itemsize: int, batch_split: bool, spread: int
) -> dict[Variant, int]:
    """The variants worth timing, each with its chunk size, in order of preference (for a
    budget that only fits the first few)."""
    plans: dict[Variant, int] = {}
    options: list[tuple[int, tuple[float, ...]]] = [(0, _TUNE_FACTORS)]
    if spread:
        options = [(spread, _TUNE_FACTORS)]
        if run.opts.parallel_chunks is None:
            options.append((0, _TUNE_FACTORS_SERIAL))
    for workers, factors in options:
        for factor in factors:
            target = int(run.opts.base_bytes * factor)
            tile = plan_tile(shapes, itemsize, target, batch_split)
            if tile is not None:
                plans.setdefault((tile, workers), target)
    return plans


def _best(times: dict[Variant, list[float]], plans: dict[Variant, int]) -> tuple[Variant, float]:
    """The fastest variant and its speedup over the original (``times[None]``)."""
    # Other processes only ever add time. The fastest round estimates a variant's own
    # cost; the median guards against a variant that is only fast when undisturbed
    # (many small chunks suffer most from descheduled intra-op threads).
    best = min(plans, key=lambda v: min(times[v]))
    by_min = min(times[None]) / max(min(times[best]), 1e-12)
    by_median = statistics.median(times[None]) / max(statistics.median(times[best]), 1e-12)
    return best, min(by_min, by_median)


# --------------------------------------------------------------------------- measuring


def _measure(
    run: Run,
    x: Tensor,
    sides: tuple[Any, ...],
    shapes: list[tuple[int, ...]],
    variants: list[Variant],
    grad: bool,
) -> dict[Variant, list[float]]:
    """Interleaved timings after one untimed warm-up call each; as many variants and
    rounds as fit in the budget (a variant costs about what the original costs)."""
    times: dict[Variant, list[float]] = {None: []}
    start = time.perf_counter()
    with _preserved(run):
        ref = _time_once(run, x, sides, shapes, None, grad)
        fit = int(_TUNE_BUDGET_S / max(ref, 1e-6)) // 2 - 1
        chosen = variants[: max(1, min(len(variants), fit))]
        for v in chosen:
            times[v] = []
            _time_once(run, x, sides, shapes, v, grad)
        for _ in range(_TUNE_ROUNDS):
            for v in times:
                times[v].append(_time_once(run, x, sides, shapes, v, grad))
            if time.perf_counter() - start > _TUNE_BUDGET_S:
                break
    return times


def _time_once(
    run: Run,
    x: Tensor,
    sides: tuple[Any, ...],
    shapes: list[tuple[int, ...]],
    variant: Variant,
    grad: bool,
) -> float:
    """One call of ``variant`` (forward, plus backward under autograd), in seconds."""
    with torch.enable_grad() if grad else torch.no_grad():
        # Inputs are prepared outside the timed region.
        xin, sin, leaves = _fresh_inputs(run, x, sides, grad)
        gout = torch.ones(shapes[-1], dtype=x.dtype) if grad else None
        start = time.perf_counter()
        if variant is None:
            out = run.reference(xin, *sin)
        else:
            out = run.chunked(xin, tuple(sin), shapes, variant[0], grad, variant[1])
        if grad and leaves:
            torch.autograd.grad(out, leaves, gout, allow_unused=True)
        return time.perf_counter() - start


def _fresh_inputs(
    run: Run, x: Tensor, sides: tuple[Any, ...], grad: bool
) -> tuple[Tensor, list[Any], list[Tensor]]:
    """Detached copies of the inputs for one timed call, and the leaves to differentiate."""
    leaves: list[Tensor] = []
    xin = x.detach()
    # The original's in-place first layer would overwrite the caller's tensor: a copy.
    if grad and x.requires_grad:
        xin = xin.clone().requires_grad_()
        leaves.append(xin)
        if run.mutates_input:
            xin = xin.clone()
    elif run.mutates_input:
        xin = xin.clone()
    sin: list[Any] = []
    for s in sides:
        if isinstance(s, Tensor):
            s = s.detach()
            if grad and s.requires_grad:
                s = s.requires_grad_()
                leaves.append(s)
        sin.append(s)
    leaves.extend(p for p in run.params() if p.requires_grad)
    return xin, sin, leaves


@contextmanager
def _preserved(run: Run) -> Iterator[None]:
    """Tuning calls bump BatchNorm stats and draw dropout masks: undo both afterwards."""
    saved: list[tuple[Tensor, Tensor]] = []
    for bn in run.bns:
        for buf in bn.buffers(recurse=False):
            saved.append((buf, buf.detach().clone()))
    rng = torch.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)
        torch.set_rng_state(rng)
