"""Depth-first execution of chains of memory-bound layers (BrainSlug, Weber et al. 2018).

Eager PyTorch runs a model layer by layer: a BatchNorm reads and writes the whole activation
tensor, then a ReLU reads and writes it again, then a pooling layer... For the memory-bound
layers between two convolutions this traffic to DRAM is most of their cost. ``depth_first``
finds maximal runs of such layers and executes each run chunk by chunk, every chunk small
enough to stay in the CPU cache while it goes through the whole run; only the run's input and
output travel to memory.

Public API::

    from sofa_top.optimizers import depth_first, depth_first_report
    model = depth_first(model)          # same object, transformed in place
    for run in depth_first_report(model): print(run)

How runs are found
    Every user-defined module (and every ``nn.Sequential``) is traced with ``torch.fx`` one
    level deep (its children stay opaque calls). In its graph a run is a maximal chain of
    eligible nodes in which every intermediate value has exactly one user: BatchNorm1d/2d/3d,
    ReLU/ReLU6/LeakyReLU/GELU/SiLU/Sigmoid/Tanh/Hardswish/ELU (modules, ``F.*``/``torch.*``
    calls and tensor methods), Max/Avg(Adaptive)Pool 1d/2d/3d, Dropout, Identity and
    element-wise adds (a residual ``out + identity`` adds a *side input* to the run). The
    module's forward is replaced by the fx code with each run collapsed into one call. When a
    forward cannot be traced, or ``use_fx=False``, an ``nn.Sequential`` is still split into
    runs of consecutive eligible children; other modules are recursed into. Runs need at least
    two layers other than Identity. Layers with hooks are never part of a run (their hooks
    would fire once per chunk).

How a run is split
    * eval (no BatchNorm uses batch statistics): along the batch, and along channels too when
      one sample is larger than a chunk. Every layer is per sample and per channel, so no
      halo is needed; spatial splitting (which pooling would need halos for) is not done,
      because one (sample, channel) plane is at most a few hundred KiB for usual image sizes.
    * training, or BatchNorm without running stats: along channels only, each chunk over the
      whole batch, so each chunk computes the exact per-channel mean/var and updates its slice
      of ``running_mean``/``running_var`` in place; ``num_batches_tracked`` is bumped once per
      call, as the original does. Channel slices are made contiguous first, which makes
      the batch statistics bit-identical to the unsplit BatchNorm's.
    * without autograd, chunk outputs are written into one preallocated output through
      ``narrow`` views, and every layer after the first works in place on the chunk's
      scratch tensor. With several intra-op threads, worker threads (one per intra-op thread, each
      running single-threaded ops) take whole chunks in turn: BrainSlug's parallelism over
      chunks, without a thread barrier at every layer of every chunk (which made chunked
      execution several times slower than eager on a loaded machine).
    * with autograd, chunks run in turn on the calling thread and are joined with
      ``torch.cat`` (differentiable; the backward then also runs chunk by chunk). A
      preallocated output written through ``narrow`` views records one CopySlices node per
      chunk whose backward copies the *whole* gradient: several times slower in our
      measurement.
    * Dropout in training draws its mask for the whole tensor once, before the chunks, with
      the same RNG call as ``F.dropout`` (``bernoulli_`` on a tensor of the full shape), so
      for the same seed the masks, outputs and gradients are bit-identical to the unsplit
      model; the mask is then applied chunk by chunk.

Tuning
    The chunk size starts from the cache sizes (``optimizers/cache.py``: per-core L2 times
    threads / 2, capped at L3/4; sysfs, falling back to 1 MiB L2 / 32 MiB L3). On the first
    call for each (run, input shape, dtype, train/eval, autograd) a short measurement (about
    1 s per run) compares the original layers with a few chunk sizes, with and without worker
    threads (forward, plus backward when autograd records); a variant must win in both the
    fastest and the median round. BatchNorm buffers and the RNG state are restored after it,
    and it never runs during ``torch.jit``/fx tracing or ``torch.compile``, so tuning cannot
    change results. A run keeps the original path when no variant is ``min_speedup`` times
    faster; the decision is recorded and shown by ``depth_first_report``. ``chunk_bytes=``
    forces a size (no tuning).

torch.compile
    Mutually exclusive: ``depth_first`` on a compiled module (``torch.compile(m)`` or
    ``m.compile()``) raises ``ValueError``. Inductor already fuses element-wise chains into
    one loop, which is the same idea done by a compiler. Compiling a depth-first model works
    but is pointless: under compilation every run takes its original path.

Limits
    CPU tensors in the default (contiguous) memory format only; anything else (CUDA,
    channels-last, sparse, autocast) takes the original path. Module state the fx code read
    at transform time (Python flags in a forward) is frozen, as with any fx transform; a
    forward whose code differs between train and eval mode is not rewritten. ``torch.save``
    of the whole module object is not supported (save the ``state_dict``; keys are unchanged).

TensorFlow/Keras: not supported (decision)
    Measured with ``benchmarks/depth_first.py --tf`` on the benchmark's BN/ReLU/pool block
    (32x112x112x64, inference, 2-core VM, medians of 5): Keras eager 680 ms, ``tf.function``
    292 ms, depth-first by hand (``tf.split`` into 8 batch chunks + ``tf.concat`` inside
    ``tf.function``) 230 ms, XLA (``jit_compile=True``) 94 ms. Chunking gains 1.27x over a
    plain graph, but XLA already fuses the element-wise chain into one loop and is 2.4x faster
    than the chunked graph, one flag away; an experimental TF version is not worth it.
    sofa-top should suggest ``jit_compile=True`` for TF instead. Details: optimizers/README.md.
"""

from __future__ import annotations

import inspect
import operator
import os
import queue
import statistics
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import Tensor, nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing
from torch.nn.modules import module as _module_mod

from sofa_top.optimizers.cache import default_chunk_bytes

__all__ = ["ChunkDecision", "RunReport", "depth_first", "depth_first_report"]

M = TypeVar("M", bound=nn.Module)

_RUNS_ATTR = "_depth_first_runs"
_SEGMENTS_ATTR = "_depth_first_segments"
_RUN_PREFIX = "_depth_first_run_"

_BN_TYPES: tuple[type[nn.Module], ...] = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_BN_DIMS: dict[type[nn.Module], tuple[int, ...]] = {
    nn.BatchNorm1d: (2, 3),
    nn.BatchNorm2d: (4,),
    nn.BatchNorm3d: (5,),
}
_ACT_MODULES: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    nn.ReLU6: "relu6",
    nn.LeakyReLU: "leaky_relu",
    nn.GELU: "gelu",
    nn.SiLU: "silu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Hardswish: "hardswish",
    nn.ELU: "elu",
}
_POOL_DIMS: dict[type[nn.Module], int] = {
    nn.MaxPool1d: 1,
    nn.MaxPool2d: 2,
    nn.MaxPool3d: 3,
    nn.AvgPool1d: 1,
    nn.AvgPool2d: 2,
    nn.AvgPool3d: 3,
    nn.AdaptiveAvgPool1d: 1,
    nn.AdaptiveAvgPool2d: 2,
    nn.AdaptiveAvgPool3d: 3,
    nn.AdaptiveMaxPool1d: 1,
    nn.AdaptiveMaxPool2d: 2,
    nn.AdaptiveMaxPool3d: 3,
}
# Modules whose output is a tensor nobody else holds: an in-place layer right after one may
# start a run (the run then stops mutating that tensor, which nobody can observe).
_FRESH_TYPES: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
    nn.Bilinear,
    nn.GroupNorm,
    nn.LayerNorm,
    *_BN_TYPES,
)

# fx call_function targets: name of the activation, and whether it takes ``inplace``.
_ACT_FUNCTIONS: dict[Any, tuple[str, bool]] = {
    F.relu: ("relu", False),
    torch.relu: ("relu", False),
    F.relu6: ("relu6", False),
    F.leaky_relu: ("leaky_relu", False),
    F.gelu: ("gelu", False),
    F.silu: ("silu", False),
    torch.sigmoid: ("sigmoid", False),
    F.sigmoid: ("sigmoid", False),
    torch.tanh: ("tanh", False),
    F.tanh: ("tanh", False),
    F.hardswish: ("hardswish", False),
    F.elu: ("elu", False),
    torch.relu_: ("relu", True),
    F.relu_: ("relu", True),
}
_ACT_METHODS: dict[str, tuple[str, bool]] = {
    "relu": ("relu", False),
    "relu_": ("relu", True),
    "sigmoid": ("sigmoid", False),
    "sigmoid_": ("sigmoid", True),
    "tanh": ("tanh", False),
    "tanh_": ("tanh", True),
}
_ADD_FUNCTIONS: dict[Any, bool] = {operator.add: False, torch.add: False, operator.iadd: True}
_ADD_METHODS: dict[str, bool] = {"add": False, "add_": True}
_ACT_DEFAULTS: dict[str, dict[str, Any]] = {
    "leaky_relu": {"negative_slope": 0.01},
    "elu": {"alpha": 1.0},
    "gelu": {"approximate": "none"},
}

# Tuning: chunk sizes tried, as multiples of the cache-derived size, and timed rounds.
_TUNE_FACTORS = (1.0, 2.0, 0.5, 4.0)
# Chunks in turn with multithreaded layers lost everywhere we measured with worker threads
# available; two sizes of them stay in the running for machines where that differs.
_TUNE_FACTORS_SERIAL = (1.0, 4.0)
_TUNE_ROUNDS = 3
_TUNE_BUDGET_S = 1.0  # per run and input signature; at least one timed round is always done


# --------------------------------------------------------------------------- report types


@dataclass(frozen=True)
class ChunkDecision:
    """What a run does for one input signature (shape, dtype, mode), and why."""

    shape: tuple[int, ...]
    dtype: str
    mode: str  # "eval" or "train" (some BatchNorm uses batch statistics)
    grad: bool  # autograd recorded the run
    split: str  # "batch", "channels", "batch+channels" or "none"
    tile: tuple[int, int] | None  # (samples, channels) per chunk
    workers: int  # >1: threads taking whole chunks; 0: chunks in turn, layers multithreaded
    chunk_bytes: int | None
    chunked: bool  # True: runs depth-first; False: original layer-by-layer path
    speedup: float | None  # measured original time / chunked time; None if not measured
    reason: str


@dataclass(frozen=True)
class RunReport:
    """One run of memory-bound layers found by :func:`depth_first`."""

    name: str
    layers: tuple[str, ...]
    source: str  # "fx" or "sequential"
    decisions: tuple[ChunkDecision, ...]


# --------------------------------------------------------------------------- run internals


class _Marker:
    """Stands for the run's main tensor or a side input in a recorded call's arguments."""

    def __init__(self, side: int | None) -> None:
        self.side = side


_MAIN = _Marker(None)


@dataclass
class _Op:
    kind: str  # "bn", "act", "pool", "dropout", "identity", "add"
    label: str
    module: nn.Module | None = None
    act: str | None = None
    act_params: dict[str, Any] = field(default_factory=dict)
    inplace: bool = False  # the original mutates its main input
    side: int | None = None  # add: index of the side input (None: scalar operand)
    scalar: Any = None
    # How the original calls it (fx function/method ops); markers stand for tensors.
    call: str = "module"
    target: Any = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Options:
    chunk_bytes: int | None
    tune: bool
    min_speedup: float
    base_bytes: int
    use_fx: bool
    parallel_chunks: bool | None


_Variant = tuple[tuple[int, int], int] | None  # (tile, workers); None: the original layers


@dataclass(frozen=True)
class _BNCall:
    running_mean: Tensor | None
    running_var: Tensor | None
    weight: Tensor | None
    bias: Tensor | None
    training: bool
    momentum: float
    eps: float


def _tracing() -> bool:
    return bool(
        torch._C._get_tracing_state() is not None
        or torch.compiler.is_compiling()
        or is_fx_symbolic_tracing()
    )


def _global_hooks() -> bool:
    return bool(
        _module_mod._global_forward_hooks
        or _module_mod._global_forward_pre_hooks
        or _module_mod._global_backward_hooks
        or _module_mod._global_backward_pre_hooks
    )


def _has_hooks(m: nn.Module) -> bool:
    return bool(
        m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
    )


def _activation(name: str, params: dict[str, Any], t: Tensor, inplace: bool) -> Tensor:
    if name == "relu":
        return torch.relu_(t) if inplace else torch.relu(t)
    if name == "relu6":
        return F.hardtanh(t, 0.0, 6.0, inplace)
    if name == "leaky_relu":
        return F.leaky_relu(t, params["negative_slope"], inplace)
    if name == "gelu":
        return F.gelu(t, approximate=params["approximate"])
    if name == "silu":
        return F.silu(t, inplace)
    if name == "sigmoid":
        return t.sigmoid_() if inplace else torch.sigmoid(t)
    if name == "tanh":
        return t.tanh_() if inplace else torch.tanh(t)
    if name == "hardswish":
        return F.hardswish(t, inplace)
    if name == "elu":
        return F.elu(t, params["alpha"], inplace)
    raise AssertionError(name)


def _module_params(m: nn.Module, name: str) -> dict[str, Any]:
    # Read at call time: a user may change e.g. negative_slope after the transform.
    if name == "leaky_relu":
        return {"negative_slope": m.negative_slope}
    if name == "elu":
        return {"alpha": m.alpha}
    if name == "gelu":
        return {"approximate": m.approximate}
    return {}


def _module_op(m: nn.Module, label: str) -> _Op | None:
    """The run op for an eligible module, or None. Exact types: subclasses may override forward."""
    if _has_hooks(m):
        return None
    kind = type(m)
    if kind in _BN_TYPES:
        return _Op("bn", label, module=m)
    if kind in _ACT_MODULES:
        return _Op("act", label, module=m, act=_ACT_MODULES[kind], inplace=_inplace(m))
    if kind in _POOL_DIMS:
        if getattr(m, "return_indices", False):
            return None
        return _Op("pool", label, module=m)
    if kind is nn.Dropout:
        return _Op("dropout", label, module=m, inplace=_inplace(m))
    if kind is nn.Identity:
        return _Op("identity", label, module=m)
    return None


def _inplace(m: nn.Module) -> bool:
    return bool(getattr(m, "inplace", False))


def _fresh_module(m: nn.Module) -> bool:
    if isinstance(m, _FRESH_TYPES) or type(m) in _POOL_DIMS:
        return not getattr(m, "return_indices", False)
    return type(m) in _ACT_MODULES and not _inplace(m)


def _real_ops(ops: list[_Op]) -> int:
    return sum(op.kind != "identity" for op in ops)


def _fill(value: Any, t: Tensor, sides: tuple[Any, ...]) -> Any:
    if isinstance(value, _Marker):
        return t if value.side is None else sides[value.side]
    if isinstance(value, tuple):
        return tuple(_fill(v, t, sides) for v in value)
    return value


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


class _Run:
    """A run of memory-bound layers executed chunk by chunk (a plain callable, not a Module:
    it holds its layers without registering them, so ``state_dict`` keys do not change)."""

    def __init__(self, name: str, ops: list[_Op], n_sides: int, source: str, opts: _Options):
        self.name = name
        self.ops = ops
        self.n_sides = n_sides
        self.source = source
        self.opts = opts
        self.decisions: dict[tuple[Any, ...], ChunkDecision] = {}
        self._shapes: dict[tuple[Any, ...], list[tuple[int, ...]] | str] = {}
        self.bns: list[nn.Module] = [op.module for op in ops if op.kind == "bn" and op.module]
        self.mutates_input = bool(ops and ops[0].inplace)

    def __repr__(self) -> str:
        return f"_Run({self.name}: {' -> '.join(op.label for op in self.ops)})"

    # ----------------------------------------------------------------- entry point

    def __call__(self, x: Any, *sides: Any) -> Any:
        if _tracing() or not isinstance(x, Tensor) or _global_hooks() or _autocast():
            return self.reference(x, *sides)
        grad = torch.is_grad_enabled() and (
            x.requires_grad
            or any(isinstance(s, Tensor) and s.requires_grad for s in sides)
            or any(p.requires_grad for p in self._params())
        )
        batch_stats = self._batch_stats()
        key = (
            tuple(x.shape),
            x.dtype,
            x.device.type,
            x.is_contiguous(),
            self.mutates_input and x._base is not None,
            batch_stats,
            tuple(bn.training for bn in self.bns),
            self._dropout_active(),
            grad,
            tuple(_signature(s) for s in sides),
        )
        decision = self.decisions.get(key)
        if decision is None:
            decision = self._decide(x, sides, grad, batch_stats)
            self.decisions[key] = decision
        if not decision.chunked or decision.tile is None:
            return self.reference(x, *sides)
        shapes = self._shapes_for(x, sides)
        assert not isinstance(shapes, str)
        return self.chunked(x, sides, shapes, decision.tile, grad, decision.workers)

    # ----------------------------------------------------------------- the two paths

    def reference(self, x: Any, *sides: Any) -> Any:
        """The original layers, called exactly as the original forward called them."""
        t = x
        for op in self.ops:
            if op.call == "module":
                assert op.module is not None
                t = op.module(t)
            elif op.call == "function":
                t = op.target(*_fill(op.args, t, sides), **op.kwargs)
            else:
                args = _fill(op.args, t, sides)
                t = getattr(args[0], op.target)(*args[1:], **op.kwargs)
        return t

    def chunked(
        self,
        x: Tensor,
        sides: tuple[Any, ...],
        shapes: list[tuple[int, ...]],
        tile: tuple[int, int],
        grad: bool,
        workers: int = 0,
    ) -> Tensor:
        """Run every chunk of ``x`` through all the layers before the next chunk.

        ``workers`` > 1 (no autograd only): that many threads, each with one intra-op thread,
        take chunks in turn, instead of every layer splitting each chunk across threads.
        """
        nb, nc = tile
        n, c = x.shape[0], x.shape[1]
        scratch = not grad  # temporaries may be overwritten in place
        steps = self._steps(x, sides, shapes)
        groups = [(c0, min(nc, c - c0)) for c0 in range(0, c, nc)]
        # BatchNorm's per-channel tensors for each channel group, sliced once per call.
        bn_slices = [
            [
                tuple(_chan(v, c0, cl, c) for v in payload[:4])
                for kind, payload in steps
                if kind == "bn"
            ]
            for c0, cl in groups
        ]

        jobs = [(b0, min(nb, n - b0), g) for b0 in range(0, n, nb) for g in range(len(groups))]
        # Under autograd each narrow() view's backward would build a zero tensor of the full
        # input size (once per chunk); one split() has one backward that concatenates.
        split: dict[int, list[Tensor]] = {}
        if grad:
            split[id(x)] = _split_tiles(x, nb, nc)
            for _, payload in steps:
                if isinstance(payload, Tensor) and payload.requires_grad:
                    split[id(payload)] = _split_tiles(payload, nb, nc)

        def cut(t: Tensor, j: int, b0: int, bl: int, c0: int, cl: int) -> Tensor:
            tiles = split.get(id(t))
            return tiles[j] if tiles is not None else _tile(t, b0, bl, c0, cl, n, c)

        def run_tile(j: int, b0: int, bl: int, g: int) -> Tensor:
            c0, cl = groups[g]
            t = cut(x, j, b0, bl, c0, cl)
            own = False  # t is a temporary of ours, safe to overwrite
            if cl < c and bl > 1 and not t.is_contiguous():
                # A channel slice of several samples is strided; BatchNorm's kernel for strided
                # input reduces in another order, the contiguous one gives bit-identical
                # batch statistics.
                t = t.contiguous()
                own = True
            k = 0
            for kind, payload in steps:
                if kind == "bn":
                    mean, var, weight, bias = bn_slices[g][k]
                    k += 1
                    training, momentum, eps = payload[4:]
                    t = torch.batch_norm(t, weight, bias, mean, var, training, momentum, eps, False)
                elif kind == "act":
                    t = _activation(payload[0], payload[1], t, own and scratch)
                elif kind == "pool":
                    t = payload(t)
                elif kind == "mul":
                    m = cut(payload, j, b0, bl, c0, cl) if payload.dim() else payload
                    t = t.mul_(m) if own and scratch else t * m
                else:  # add
                    if isinstance(payload, Tensor):
                        payload = cut(payload, j, b0, bl, c0, cl)
                    t = t.add_(payload) if own and scratch else t + payload
                own = True
            return t

        if grad:
            outs = [run_tile(j, *job) for j, job in enumerate(jobs)]
            per_row = len(groups)
            rows = [
                outs[i] if per_row == 1 else torch.cat(outs[i : i + per_row], 1)
                for i in range(0, len(outs), per_row)
            ]
            return rows[0] if len(rows) == 1 else torch.cat(rows, 0)
        out = x.new_empty(shapes[-1])

        def store(j: int) -> None:
            b0, bl, g = jobs[j]
            c0, cl = groups[g]
            _tile(out, b0, bl, c0, cl, n, c).copy_(run_tile(j, b0, bl, g))

        if workers > 1 and len(jobs) > 1:
            _workers(workers).map(list(range(len(jobs))), store, torch.is_inference_mode_enabled())
        else:
            for j in range(len(jobs)):
                store(j)
        return out

    def _steps(
        self, x: Tensor, sides: tuple[Any, ...], shapes: list[tuple[int, ...]]
    ) -> list[tuple[str, Any]]:
        """Per-call preparation: BatchNorm arguments (bumping num_batches_tracked once),
        activation parameters, dropout masks; Identity and inactive dropout drop out."""
        masks = self._dropout_masks(x, shapes)
        steps: list[tuple[str, Any]] = []
        for i, op in enumerate(self.ops):
            if op.kind == "bn":
                assert op.module is not None
                call = self._bn_call(op.module)
                steps.append(
                    (
                        "bn",
                        (
                            call.running_mean,
                            call.running_var,
                            call.weight,
                            call.bias,
                            call.training,
                            call.momentum,
                            call.eps,
                        ),
                    )
                )
            elif op.kind == "act":
                assert op.act is not None
                params = op.act_params
                if op.module is not None:
                    params = _module_params(op.module, op.act)
                steps.append(("act", (op.act, params)))
            elif op.kind == "pool":
                assert op.module is not None
                steps.append(("pool", op.module.forward))
            elif op.kind == "dropout" and i in masks:
                steps.append(("mul", masks[i]))
            elif op.kind == "add":
                steps.append(("add", op.scalar if op.side is None else sides[op.side]))
        return steps

    # ----------------------------------------------------------------- helpers

    def _params(self) -> Iterator[Tensor]:
        for bn in self.bns:
            yield from bn.parameters(recurse=False)

    def _batch_stats(self) -> bool:
        return any(
            bn.training or (bn.running_mean is None and bn.running_var is None) for bn in self.bns
        )

    def _dropout_active(self) -> bool:
        return any(
            op.kind == "dropout" and op.module is not None and op.module.training for op in self.ops
        )

    @staticmethod
    def _bn_call(bn: nn.Module) -> _BNCall:
        # Mirrors torch.nn.modules.batchnorm._BatchNorm.forward; runs once per call, so
        # num_batches_tracked is bumped once however many chunks there are.
        assert isinstance(bn, nn.modules.batchnorm._BatchNorm)
        factor = 0.0 if bn.momentum is None else bn.momentum
        tracked = bn.num_batches_tracked
        if bn.training and bn.track_running_stats and isinstance(tracked, Tensor):
            tracked.add_(1)
            factor = 1.0 / float(tracked) if bn.momentum is None else bn.momentum
        use_batch = bn.training or (bn.running_mean is None and bn.running_var is None)
        keep = not bn.training or bn.track_running_stats
        return _BNCall(
            bn.running_mean if keep else None,
            bn.running_var if keep else None,
            bn.weight,
            bn.bias,
            use_batch,
            factor,
            bn.eps,
        )

    def _dropout_masks(self, x: Tensor, shapes: list[tuple[int, ...]]) -> dict[int, Tensor]:
        # Same RNG calls, in the same order, as F.dropout on the whole tensor (see docstring).
        masks: dict[int, Tensor] = {}
        for i, op in enumerate(self.ops):
            if op.kind != "dropout" or not isinstance(op.module, nn.Dropout):
                continue
            if not op.module.training:
                continue
            p = float(op.module.p)
            if p == 0.0:
                continue
            if p == 1.0:
                masks[i] = x.new_zeros(())
                continue
            noise = torch.empty(shapes[i], dtype=x.dtype, device=x.device).bernoulli_(1 - p)
            masks[i] = noise.div_(1 - p)
        return masks

    def _shapes_for(self, x: Tensor, sides: tuple[Any, ...]) -> list[tuple[int, ...]] | str:
        """Shape before each op and of the output, or why the run cannot be chunked."""
        key = (tuple(x.shape), x.dtype, tuple(_signature(s) for s in sides))
        cached = self._shapes.get(key)
        if cached is None:
            cached = self._propagate(x, sides)
            self._shapes[key] = cached
        return cached

    def _propagate(self, x: Tensor, sides: tuple[Any, ...]) -> list[tuple[int, ...]] | str:
        if x.dim() < 2:
            return "input has fewer than 2 dims"
        t = torch.empty(x.shape, dtype=x.dtype, device="meta")
        shapes: list[tuple[int, ...]] = []
        for op in self.ops:
            shapes.append(tuple(t.shape))
            try:
                if op.kind == "bn":
                    assert isinstance(op.module, nn.modules.batchnorm._BatchNorm)
                    if t.dim() not in _BN_DIMS[type(op.module)]:
                        return f"{op.label}: {t.dim()}D input"
                    if t.shape[1] != op.module.num_features:
                        return f"{op.label}: channel count mismatch"
                elif op.kind == "pool":
                    assert op.module is not None
                    if t.dim() != _POOL_DIMS[type(op.module)] + 2:
                        return f"{op.label}: unbatched input"
                    t = op.module.forward(t)
                elif op.kind == "add" and op.side is not None:
                    s = sides[op.side]
                    if not isinstance(s, Tensor):
                        return f"{op.label}: side input is not a tensor"
                    if tuple(s.shape) != tuple(t.shape) or s.dtype != x.dtype:
                        return f"{op.label}: side input shape/dtype differs (broadcast)"
                    if s.device != x.device:
                        return f"{op.label}: side input on another device"
                elif op.kind == "add" and not isinstance(op.scalar, int | float):
                    return f"{op.label}: non-numeric operand"
            except Exception as exc:  # the original path raises the real error
                return f"{op.label}: {exc}"
        shapes.append(tuple(t.shape))
        return shapes

    def _unsupported(self, x: Tensor, sides: tuple[Any, ...]) -> str | None:
        if x.device.type != "cpu":
            return f"device {x.device.type}: cache chunking is for CPU"
        if not x.dtype.is_floating_point:
            return f"dtype {x.dtype}"
        if x.layout != torch.strided or not x.is_contiguous():
            return "input not contiguous (e.g. channels_last)"
        if self.mutates_input and x._base is not None:
            return "in-place first layer on a view"
        shapes = self._shapes_for(x, sides)
        if isinstance(shapes, str):
            return shapes
        for op, shape in zip(self.ops, shapes, strict=False):
            # F.batch_norm raises on one value per channel in training: let the original do it.
            training = op.module is not None and op.module.training
            if op.kind == "bn" and training and _prod(shape) == shape[1]:
                return f"{op.label}: one value per channel in training"
        return None

    def _plan(
        self, shapes: list[tuple[int, ...]], itemsize: int, target: int, batch_split: bool
    ) -> tuple[int, int] | None:
        n, c = shapes[0][0], shapes[0][1]
        per_chan = max(_prod(s[2:]) for s in shapes) * itemsize
        if batch_split:
            per_sample = c * per_chan
            if per_sample <= target:
                nb, nc = max(1, target // per_sample), c
            else:
                nb, nc = 1, max(1, target // per_chan)
        else:
            nb, nc = n, max(1, target // max(1, n * per_chan))
        nb, nc = min(nb, n), min(nc, c)
        if nb >= n and nc >= c:
            return None
        return nb, nc

    # ----------------------------------------------------------------- decisions

    def _decide(
        self, x: Tensor, sides: tuple[Any, ...], grad: bool, batch_stats: bool
    ) -> ChunkDecision:
        mode = "train" if batch_stats else "eval"

        def decision(
            variant: _Variant,
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
                mode=mode,
                grad=grad,
                split=split,
                tile=tile,
                workers=workers,
                chunk_bytes=chunk,
                chunked=chunked,
                speedup=speedup,
                reason=reason,
            )

        why = self._unsupported(x, sides)
        if why is not None:
            return decision(None, None, False, None, why)
        shapes = self._shapes_for(x, sides)
        assert not isinstance(shapes, str)
        itemsize = x.element_size()
        batch_split = not batch_stats
        threads = torch.get_num_threads()
        # Worker threads only without autograd: grad mode, saved-tensor hooks (checkpointing)
        # and anomaly mode are per thread, and the backward would not be split by chunks.
        can_spread = not grad and threads > 1 and self.opts.parallel_chunks is not False
        spread = threads if can_spread else 0
        if self.opts.chunk_bytes is not None or not self.opts.tune:
            target = self.opts.chunk_bytes or self.opts.base_bytes
            tile = self._plan(shapes, itemsize, target, batch_split)
            if tile is None:
                return decision(None, target, False, None, "fits in one chunk")
            why = "forced chunk_bytes" if self.opts.chunk_bytes else "tuning off"
            return decision((tile, spread), target, True, None, why)
        plans: dict[_Variant, int] = {}  # in order of preference, for a tight budget
        options: list[tuple[int, tuple[float, ...]]] = [(0, _TUNE_FACTORS)]
        if spread:
            options = [(spread, _TUNE_FACTORS)]
            if self.opts.parallel_chunks is None:
                options.append((0, _TUNE_FACTORS_SERIAL))
        for workers, factors in options:
            for factor in factors:
                target = int(self.opts.base_bytes * factor)
                tile = self._plan(shapes, itemsize, target, batch_split)
                if tile is not None:
                    plans.setdefault((tile, workers), target)
        if not plans:
            return decision(None, self.opts.base_bytes, False, None, "fits in one chunk")
        times = self._measure(x, sides, shapes, list(plans), grad)
        plans = {v: plans[v] for v in times if v is not None}
        # Other processes only ever add time. The fastest round estimates a variant's own
        # cost; the median guards against a variant that is only fast when undisturbed
        # (many small chunks suffer most from descheduled intra-op threads).
        best = min(plans, key=lambda v: min(times[v]))
        by_min = min(times[None]) / max(min(times[best]), 1e-12)
        by_median = statistics.median(times[None]) / max(statistics.median(times[best]), 1e-12)
        speedup = min(by_min, by_median)
        if speedup >= self.opts.min_speedup:
            return decision(best, plans[best], True, speedup, "measured faster")
        return decision(best, plans[best], False, speedup, "chunking not faster: original kept")

    def _measure(
        self,
        x: Tensor,
        sides: tuple[Any, ...],
        shapes: list[tuple[int, ...]],
        variants: list[_Variant],
        grad: bool,
    ) -> dict[_Variant, list[float]]:
        """Interleaved timings after one untimed warm-up call each; as many variants and
        rounds as fit in the budget (a variant costs about what the original costs)."""
        times: dict[_Variant, list[float]] = {None: []}
        start = time.perf_counter()
        with self._preserved():
            ref = self._time_once(x, sides, shapes, None, grad)
            fit = int(_TUNE_BUDGET_S / max(ref, 1e-6)) // 2 - 1
            chosen = variants[: max(1, min(len(variants), fit))]
            for v in chosen:
                times[v] = []
                self._time_once(x, sides, shapes, v, grad)
            for _ in range(_TUNE_ROUNDS):
                for v in times:
                    times[v].append(self._time_once(x, sides, shapes, v, grad))
                if time.perf_counter() - start > _TUNE_BUDGET_S:
                    break
        return times

    def _time_once(
        self,
        x: Tensor,
        sides: tuple[Any, ...],
        shapes: list[tuple[int, ...]],
        variant: _Variant,
        grad: bool,
    ) -> float:
        # Inputs are prepared outside the timed region. The original's in-place first layer
        # would overwrite the caller's tensor, so it gets a copy.
        with torch.enable_grad() if grad else torch.no_grad():
            leaves: list[Tensor] = []
            xin = x.detach()
            if grad and x.requires_grad:
                xin = xin.clone().requires_grad_()
                leaves.append(xin)
                if self.mutates_input:
                    xin = xin.clone()
            elif self.mutates_input:
                xin = xin.clone()
            sin: list[Any] = []
            for s in sides:
                if isinstance(s, Tensor):
                    s = s.detach()
                    if grad and s.requires_grad:
                        s = s.requires_grad_()
                        leaves.append(s)
                sin.append(s)
            leaves.extend(p for p in self._params() if p.requires_grad)
            gout = torch.ones(shapes[-1], dtype=x.dtype) if grad else None
            start = time.perf_counter()
            if variant is None:
                out = self.reference(xin, *sin)
            else:
                out = self.chunked(xin, tuple(sin), shapes, variant[0], grad, variant[1])
            if grad and leaves:
                torch.autograd.grad(out, leaves, gout, allow_unused=True)
            return time.perf_counter() - start

    @contextmanager
    def _preserved(self) -> Iterator[None]:
        """Tuning calls bump BatchNorm stats and draw dropout masks: undo both afterwards."""
        saved: list[tuple[Tensor, Tensor]] = []
        for bn in self.bns:
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

    def report(self) -> RunReport:
        return RunReport(
            self.name,
            tuple(op.label for op in self.ops),
            self.source,
            tuple(self.decisions.values()),
        )


class _Workers:
    """Threads that each run single-threaded ops on whole chunks (BrainSlug's parallelism
    over chunks): no barrier between the threads at every layer of every chunk."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pid = os.getpid()
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        ready = threading.Barrier(n + 1)
        default = torch.get_num_threads()
        for i in range(n):
            thread = threading.Thread(
                target=self._loop, args=(ready,), name=f"depth-first-{i}", daemon=True
            )
            thread.start()
        ready.wait()
        # torch.set_num_threads(1) in a worker also became the default for threads created
        # from now on; put the caller's value back (the workers keep 1, set per thread).
        torch.set_num_threads(default)

    def _loop(self, ready: threading.Barrier) -> None:
        torch.get_num_threads()  # torch's lazy per-thread init would later undo the 1 below
        torch.set_num_threads(1)
        ready.wait()
        while (task := self._tasks.get()) is not None:
            task()

    def stop(self) -> None:
        for _ in range(self.n):
            self._tasks.put(None)

    def map(self, jobs: list[Any], fn: Callable[[Any], None], inference: bool) -> None:
        """Call ``fn`` on every job, the workers taking jobs in turn; re-raise the first error."""
        pending = iter(jobs)
        lock = threading.Lock()
        errors: list[BaseException] = []
        done = threading.Semaphore(0)

        def work() -> None:
            try:
                # Grad mode is per thread: the workers must not record autograd.
                with torch.inference_mode() if inference else torch.no_grad():
                    while not errors:
                        with lock:
                            job = next(pending, None)
                        if job is None:
                            break
                        fn(job)
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)
            finally:
                done.release()

        for _ in range(self.n):
            self._tasks.put(work)
        for _ in range(self.n):
            done.acquire()
        if errors:
            raise errors[0]


_WORKERS: _Workers | None = None
_WORKERS_LOCK = threading.Lock()


def _workers(n: int) -> _Workers:
    global _WORKERS
    with _WORKERS_LOCK:
        pool = _WORKERS
        # Threads do not survive fork (DataLoader workers): a child builds its own.
        if pool is None or pool.n != n or pool.pid != os.getpid():
            if pool is not None and pool.pid == os.getpid():
                pool.stop()
            pool = _WORKERS = _Workers(n)
        return pool


def _signature(value: Any) -> Any:
    if isinstance(value, Tensor):
        return (tuple(value.shape), value.dtype, value.device.type)
    return type(value)


def _autocast() -> bool:
    return bool(torch.is_autocast_enabled("cpu"))


def _tile(t: Tensor, b0: int, bl: int, c0: int, cl: int, n: int, c: int) -> Tensor:
    if bl < n:
        t = t.narrow(0, b0, bl)
    if cl < c:
        t = t.narrow(1, c0, cl)
    return t


def _split_tiles(t: Tensor, nb: int, nc: int) -> list[Tensor]:
    """Tiles of ``t`` in job order (rows of samples, then channel groups)."""
    rows = torch.split(t, nb, 0) if nb < t.shape[0] else (t,)
    return [
        tile for row in rows for tile in (torch.split(row, nc, 1) if nc < t.shape[1] else (row,))
    ]


def _chan(v: Tensor | None, c0: int, cl: int, c: int) -> Tensor | None:
    if v is None or cl >= c:
        return v
    return v.narrow(0, c0, cl)


# --------------------------------------------------------------------------- fx path


class _ShallowTracer(fx.Tracer):
    """Traces one module's own forward; every child stays an opaque call."""

    def __init__(self, root: nn.Module) -> None:
        super().__init__()
        self._root = root

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return m is not self._root


def _trace(module: nn.Module) -> fx.GraphModule | None:
    """Shallow fx trace, or None when the forward cannot be traced or depends on the mode."""
    was_training = module.training
    codes: list[str] = []
    gm: fx.GraphModule | None = None
    try:
        for training in (False, True):
            module.training = training
            graph = _ShallowTracer(module).trace(module)
            gm = fx.GraphModule(module, graph)
            codes.append(gm.code)
    except Exception:
        return None
    finally:
        module.training = was_training
    # A forward that branches on self.training would be frozen in one mode by fx.
    if codes[0] != codes[1]:
        return None
    return gm


def _node_op(node: fx.Node, root: nn.Module, prefix: str) -> tuple[_Op, list[fx.Node], Any] | None:
    """(op, nodes that may be its main input, the other operand) for an eligible node."""
    if node.op == "call_module":
        assert isinstance(node.target, str)
        if node.target.startswith(_RUN_PREFIX):
            return None
        op = _module_op(root.get_submodule(node.target), prefix + node.target)
        if op is None or len(node.args) != 1 or node.kwargs:
            return None
        if not isinstance(node.args[0], fx.Node):
            return None
        return op, [node.args[0]], None
    if node.op not in ("call_function", "call_method"):
        return None
    target = node.target
    args, kwargs = node.args, dict(node.kwargs)
    if not args or any(isinstance(v, fx.Node) for v in kwargs.values()):
        return None
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    label = f"{prefix}<{name}>"
    if node.op == "call_function" and target in _ACT_FUNCTIONS:
        act, inplace = _ACT_FUNCTIONS[target]
        bound = _bind_activation(target, act, args, kwargs)
        if bound is None or not isinstance(args[0], fx.Node):
            return None
        params, bound_inplace = bound
        op = _Op("act", label, act=act, act_params=params, inplace=inplace or bound_inplace)
    elif node.op == "call_method" and isinstance(target, str) and target in _ACT_METHODS:
        act, inplace = _ACT_METHODS[target]
        if len(args) != 1 or kwargs or not isinstance(args[0], fx.Node):
            return None
        op = _Op("act", label, act=act, inplace=inplace)
    elif (node.op == "call_function" and target in _ADD_FUNCTIONS) or (
        node.op == "call_method" and isinstance(target, str) and target in _ADD_METHODS
    ):
        inplace = _ADD_METHODS[target] if isinstance(target, str) else _ADD_FUNCTIONS[target]
        if len(args) != 2 or kwargs:
            return None
        a, b = args
        if a is b:
            return None
        nodes = [v for v in (a, b) if isinstance(v, fx.Node)]
        if not nodes or any(not isinstance(v, fx.Node | int | float) for v in (a, b)):
            return None
        if node.op == "call_method" or inplace:
            # Methods and in-place adds run on args[0]: only it can carry the run.
            if not isinstance(a, fx.Node):
                return None
            nodes = [a]
        op = _Op("add", label, inplace=inplace)
        return _with_call(op, node), nodes, None
    else:
        return None
    return _with_call(op, node), [args[0]], None


def _with_call(op: _Op, node: fx.Node) -> _Op:
    op.call = "function" if node.op == "call_function" else "method"
    op.target = node.target
    op.kwargs = dict(node.kwargs)
    return op


def _bind_activation(
    target: Any, act: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], bool] | None:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # C builtins (torch.relu, F.gelu)
        if len(args) != 1 or set(kwargs) - ({"approximate"} if act == "gelu" else set()):
            return None
        params = dict(_ACT_DEFAULTS.get(act, {}))
        params.update(kwargs)
        return params, False
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values = dict(bound.arguments)
    values.pop(next(iter(signature.parameters)))
    inplace = bool(values.pop("inplace", False))
    if any(isinstance(v, fx.Node) for v in values.values()):
        return None
    params = {k: v for k, v in values.items() if k in _ACT_DEFAULTS.get(act, {})}
    if set(values) - set(params):
        return None
    return params, inplace


def _fresh_node(node: fx.Node, root: nn.Module) -> bool:
    if len(node.users) != 1 or node.op != "call_module":
        return False
    assert isinstance(node.target, str)
    return _fresh_module(root.get_submodule(node.target))


@dataclass
class _Chain:
    input: fx.Node
    nodes: list[fx.Node]
    ops: list[_Op]
    sides: list[fx.Node]


def _find_chains(graph: fx.Graph, root: nn.Module, prefix: str) -> list[_Chain]:
    tails: dict[fx.Node, _Chain] = {}
    chains: list[_Chain] = []
    for node in graph.nodes:
        found = _node_op(node, root, prefix)
        if found is None:
            continue
        op, mains, _ = found
        chain = None
        main = mains[0]
        for candidate in mains:
            open_chain = tails.get(candidate)
            if open_chain is not None and len(candidate.users) == 1:
                chain, main = open_chain, candidate
                del tails[candidate]
                break
        if chain is None:
            if op.inplace and not _fresh_node(main, root):
                continue  # would mutate a tensor someone else may still read
            chain = _Chain(main, [], [], [])
            chains.append(chain)
        chain.nodes.append(node)
        chain.ops.append(_recorded(op, node, main, chain))
        tails[node] = chain
    return [c for c in chains if _real_ops(c.ops) >= 2]


def _recorded(op: _Op, node: fx.Node, main: fx.Node, chain: _Chain) -> _Op:
    """Fill in the op's arguments with markers, adding tensor operands as side inputs."""
    if op.call == "module":
        return op
    args: list[Any] = []
    for value in node.args:
        if value is main:
            args.append(_MAIN)
        elif isinstance(value, fx.Node):
            op.side = len(chain.sides)
            chain.sides.append(value)
            args.append(_Marker(op.side))
        else:
            args.append(value)
            if op.kind == "add":
                op.scalar = value
    op.args = tuple(args)
    return op


def _rewrite_fx(module: nn.Module, prefix: str, opts: _Options) -> list[_Run] | None:
    gm = _trace(module)
    if gm is None:
        return None
    chains = _find_chains(gm.graph, module, prefix)
    runs: list[_Run] = []
    graph = gm.graph
    # A later run may read an earlier run's output, whose tail node is erased below.
    replaced: dict[fx.Node, fx.Node] = {}
    for i, chain in enumerate(chains):
        attr = f"{_RUN_PREFIX}{i}"
        run = _Run(_run_name(chain.ops), chain.ops, len(chain.sides), "fx", opts)
        last = chain.nodes[-1]
        with graph.inserting_before(last):
            # create_node, not call_module: the run is deliberately not a registered submodule.
            inputs = [replaced.get(n, n) for n in (chain.input, *chain.sides)]
            new = graph.create_node("call_module", attr, tuple(inputs))
        last.replace_all_uses_with(new)
        replaced[last] = new
        for node in reversed(chain.nodes):
            graph.erase_node(node)
        # In the instance __dict__, so the generated ``self._depth_first_run_0(...)`` finds it
        # without it being a child module (state_dict and named_modules stay unchanged).
        module.__dict__[attr] = run
        runs.append(run)
    if runs:
        gm.recompile()
        # Bound to the original module, so the code always sees its current children/buffers.
        forward = type(gm).forward
        module.__dict__["forward"] = types.MethodType(forward, module)
    return runs


def _run_name(ops: list[_Op]) -> str:
    return ops[0].label if len(ops) == 1 else f"{ops[0].label}..{ops[-1].label}"


# --------------------------------------------------------------------------- Sequential path


def _sequential_forward(self: nn.Sequential, input: Any) -> Any:
    for item in self.__dict__[_SEGMENTS_ATTR]:
        input = item(input)
    return input


def _rewrite_sequential(seq: nn.Sequential, prefix: str, opts: _Options) -> list[_Run]:
    segments: list[Callable[[Any], Any]] = []
    runs: list[_Run] = []
    pending: list[tuple[_Op, nn.Module]] = []

    def flush() -> None:
        ops = [op for op, _ in pending]
        if _real_ops(ops) >= 2:
            run = _Run(_run_name(ops), ops, 0, "sequential", opts)
            segments.append(run)
            runs.append(run)
        else:
            segments.extend(m for _, m in pending)
        pending.clear()

    previous_fresh = False  # the Sequential's input belongs to the caller
    for name, child in seq.named_children():
        op = _module_op(child, prefix + name)
        if op is not None and (pending or not op.inplace or previous_fresh):
            pending.append((op, child))
        else:
            flush()
            segments.append(child)
        previous_fresh = _fresh_module(child)
    flush()
    if runs:
        seq.__dict__[_SEGMENTS_ATTR] = segments
        seq.__dict__["forward"] = types.MethodType(_sequential_forward, seq)
    return runs


# --------------------------------------------------------------------------- public API


def _is_torch_builtin(m: nn.Module) -> bool:
    return type(m).__module__.startswith(("torch.nn.", "torch.ao.nn."))


def _transform(module: nn.Module, prefix: str, opts: _Options, seen: set[int]) -> None:
    if id(module) in seen:
        return
    seen.add(id(module))
    already = "forward" in module.__dict__  # rewritten before (by us or someone else)
    is_seq = isinstance(module, nn.Sequential)
    if not already and (is_seq or not _is_torch_builtin(module)):
        runs: list[_Run] | None = None
        if opts.use_fx:
            runs = _rewrite_fx(module, prefix, opts)
        if runs is None and is_seq:
            assert isinstance(module, nn.Sequential)
            runs = _rewrite_sequential(module, prefix, opts)
        if runs:
            module.__dict__[_RUNS_ATTR] = runs
    for name, child in module.named_children():
        _transform(child, f"{prefix}{name}.", opts, seen)


def _check_not_compiled(model: nn.Module) -> None:
    if isinstance(model, torch.jit.ScriptModule):
        raise ValueError("depth_first cannot transform a TorchScript module; pass the nn.Module")
    for name, m in model.named_modules():
        compiled = "_orig_mod" in m._modules or getattr(m, "_compiled_call_impl", None)
        if compiled:
            where = f" (submodule {name!r})" if name else ""
            raise ValueError(
                f"depth_first and torch.compile are mutually exclusive: the module{where} is "
                "compiled. Inductor already fuses element-wise chains; apply depth_first to "
                "the uncompiled module, or compile without depth_first."
            )


def depth_first(
    model: M,
    *,
    chunk_bytes: int | None = None,
    tune: bool = True,
    min_speedup: float = 1.05,
    use_fx: bool = True,
    parallel_chunks: bool | None = None,
) -> M:
    """Execute runs of memory-bound layers depth-first over cache-sized chunks.

    Transforms ``model`` in place and returns it (same object; parameters, buffers and
    ``state_dict`` keys unchanged). ``chunk_bytes`` forces the chunk size in bytes and turns
    tuning off; ``tune=False`` uses the cache-derived size without measuring; a run keeps the
    original path unless chunking measures ``min_speedup`` times faster; ``use_fx=False``
    only splits ``nn.Sequential`` children; ``parallel_chunks`` forces (True) or forbids
    (False) running inference chunks on worker threads, one chunk per thread (default:
    tuning tries both; off with ``chunk_bytes``). Raises ``ValueError`` on a compiled module.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"depth_first expects an nn.Module, got {type(model).__name__}")
    _check_not_compiled(model)
    if chunk_bytes is not None and chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    opts = _Options(chunk_bytes, tune, min_speedup, default_chunk_bytes(), use_fx, parallel_chunks)
    _transform(model, "", opts, set())
    return model


def depth_first_report(model: nn.Module) -> list[RunReport]:
    """The runs :func:`depth_first` found in ``model``, with each input signature's decision."""
    reports: list[RunReport] = []
    for m in model.modules():
        for run in m.__dict__.get(_RUNS_ATTR, []):
            reports.append(run.report())
    return reports
