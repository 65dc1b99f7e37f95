"""A run: the callable that replaces a chain of layers, and picks its path on every call.

On each call a :class:`Run` looks up the decision for the input's signature (shape, dtype,
train/eval, autograd, ...), asking the tuner the first time, then either calls the original
layers or runs them chunk by chunk. Anything it cannot chunk exactly (tracing, hooks,
autocast, non-CPU or non-contiguous input, shapes the layers reject) takes the original path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing
from torch.nn.modules import module as _module_mod

from sofa_top.optimizers.depth_first.chunked import prepare_steps, run_chunked
from sofa_top.optimizers.depth_first.ops import BN_DIMS, POOL_DIMS, Op, call_original
from sofa_top.optimizers.depth_first.options import Options, Shapes
from sofa_top.optimizers.depth_first.report import ChunkDecision, RunReport
from sofa_top.optimizers.depth_first.tuner import decide


class Run:
    """A run of memory-bound layers executed chunk by chunk (a plain callable, not a Module:
    it holds its layers without registering them, so ``state_dict`` keys do not change)."""

    def __init__(self, name: str, ops: list[Op], n_sides: int, source: str, opts: Options):
        self.name = name
        self.ops = ops
        self.n_sides = n_sides
        self.source = source
        self.opts = opts
        self.decisions: dict[tuple[Any, ...], ChunkDecision] = {}
        self._shapes: dict[tuple[Any, ...], Shapes] = {}
        self.bns: list[nn.Module] = [op.module for op in ops if op.kind == "bn" and op.module]
        self.mutates_input = bool(ops and ops[0].inplace)

    def __repr__(self) -> str:
        return f"Run({self.name}: {' -> '.join(op.label for op in self.ops)})"

    def __call__(self, x: Any, *sides: Any) -> Any:
        if _tracing() or not isinstance(x, Tensor) or _global_hooks() or _autocast():
            return self.reference(x, *sides)
        grad = torch.is_grad_enabled() and (
            x.requires_grad
            or any(isinstance(s, Tensor) and s.requires_grad for s in sides)
            or any(p.requires_grad for p in self.params())
        )
        batch_stats = self.batch_stats()
        key = self._key(x, sides, grad, batch_stats)
        decision = self.decisions.get(key)
        if decision is None:
            decision = decide(self, x, sides, grad, batch_stats)
            self.decisions[key] = decision
        if not decision.chunked or decision.tile is None:
            return self.reference(x, *sides)
        shapes = self.shapes_for(x, sides)
        assert not isinstance(shapes, str)
        return self.chunked(x, sides, shapes, decision.tile, grad, decision.workers)

    def _key(self, x: Tensor, sides: tuple[Any, ...], grad: bool, batch_stats: bool) -> Any:
        """Everything a decision depends on: one tuning per distinct key."""
        return (
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

    # ----------------------------------------------------------------- the two paths

    def reference(self, x: Any, *sides: Any) -> Any:
        """The original layers, called exactly as the original forward called them."""
        return call_original(self.ops, x, sides)

    def chunked(
        self,
        x: Tensor,
        sides: tuple[Any, ...],
        shapes: list[tuple[int, ...]],
        tile: tuple[int, int],
        grad: bool,
        workers: int = 0,
    ) -> Tensor:
        """Run every chunk of ``x`` through all the layers before the next chunk."""
        steps = prepare_steps(self.ops, x, sides, shapes)
        return run_chunked(x, steps, shapes[-1], tile, grad, workers)

    # ----------------------------------------------------------------- state

    def params(self) -> Iterator[Tensor]:
        """The run's BatchNorm parameters."""
        for bn in self.bns:
            yield from bn.parameters(recurse=False)

    def batch_stats(self) -> bool:
        """Whether some BatchNorm normalizes with the batch's statistics."""
        return any(
            bn.training or (bn.running_mean is None and bn.running_var is None) for bn in self.bns
        )

    def _dropout_active(self) -> bool:
        return any(
            op.kind == "dropout" and op.module is not None and op.module.training for op in self.ops
        )

    # ----------------------------------------------------------------- can it be chunked

    def shapes_for(self, x: Tensor, sides: tuple[Any, ...]) -> Shapes:
        """Shape before each op and of the output, or why the run cannot be chunked."""
        key = (tuple(x.shape), x.dtype, tuple(_signature(s) for s in sides))
        cached = self._shapes.get(key)
        if cached is None:
            cached = self._propagate(x, sides)
            self._shapes[key] = cached
        return cached

    def _propagate(self, x: Tensor, sides: tuple[Any, ...]) -> Shapes:
        if x.dim() < 2:
            return "input has fewer than 2 dims"
        t = torch.empty(x.shape, dtype=x.dtype, device="meta")
        shapes: list[tuple[int, ...]] = []
        for op in self.ops:
            shapes.append(tuple(t.shape))
            try:
                why, t = _check_op(op, t, x, sides)
            except Exception as exc:  # the original path raises the real error
                return f"{op.label}: {exc}"
            if why is not None:
                return f"{op.label}: {why}"
        shapes.append(tuple(t.shape))
        return shapes

    def unsupported(self, x: Tensor, sides: tuple[Any, ...]) -> str | None:
        """Why this input must take the original path, or None."""
        if x.device.type != "cpu":
            return f"device {x.device.type}: cache chunking is for CPU"
        if not x.dtype.is_floating_point:
            return f"dtype {x.dtype}"
        if x.layout != torch.strided or not x.is_contiguous():
            return "input not contiguous (e.g. channels_last)"
        if self.mutates_input and x._base is not None:
            return "in-place first layer on a view"
        shapes = self.shapes_for(x, sides)
        if isinstance(shapes, str):
            return shapes
        for op, shape in zip(self.ops, shapes, strict=False):
            # F.batch_norm raises on one value per channel in training: let the original do it.
            training = op.module is not None and op.module.training
            if op.kind == "bn" and training and math.prod(shape) == shape[1]:
                return f"{op.label}: one value per channel in training"
        return None

    def report(self) -> RunReport:
        """The run's layers and its decisions so far."""
        return RunReport(
            self.name,
            tuple(op.label for op in self.ops),
            self.source,
            tuple(self.decisions.values()),
        )


def _check_op(op: Op, t: Tensor, x: Tensor, sides: tuple[Any, ...]) -> tuple[str | None, Tensor]:
    """(why ``op`` cannot be chunked on meta tensor ``t``, or None; the shape after it)."""
    if op.kind == "bn":
        assert isinstance(op.module, nn.modules.batchnorm._BatchNorm)
        if t.dim() not in BN_DIMS[type(op.module)]:
            return f"{t.dim()}D input", t
        if t.shape[1] != op.module.num_features:
            return "channel count mismatch", t
    elif op.kind == "pool":
        assert op.module is not None
        if t.dim() != POOL_DIMS[type(op.module)] + 2:
            return "unbatched input", t
        t = op.module.forward(t)
    elif op.kind == "add" and op.side is not None:
        s = sides[op.side]
        if not isinstance(s, Tensor):
            return "side input is not a tensor", t
        if tuple(s.shape) != tuple(t.shape) or s.dtype != x.dtype:
            return "side input shape/dtype differs (broadcast)", t
        if s.device != x.device:
            return "side input on another device", t
    elif op.kind == "add" and not isinstance(op.scalar, int | float):
        return "non-numeric operand", t
    return None, t


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


def _autocast() -> bool:
    return bool(torch.is_autocast_enabled("cpu"))


def _signature(value: Any) -> Any:
    if isinstance(value, Tensor):
        return (tuple(value.shape), value.dtype, value.device.type)
    return type(value)
