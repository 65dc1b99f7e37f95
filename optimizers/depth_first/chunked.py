"""Chunked execution: every chunk of the input goes through all of a run's layers in turn.

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
      scratch tensor. With several intra-op threads, worker threads (``pool.py``) take whole
      chunks in turn.
    * with autograd, chunks run in turn on the calling thread and are joined with
      ``torch.cat`` (differentiable; the backward then also runs chunk by chunk). A
      preallocated output written through ``narrow`` views records one CopySlices node per
      chunk whose backward copies the *whole* gradient: several times slower in our
      measurement.
    * Dropout in training draws its mask for the whole tensor once, before the chunks, with
      the same RNG call as ``F.dropout`` (``bernoulli_`` on a tensor of the full shape), so
      for the same seed the masks, outputs and gradients are bit-identical to the unsplit
      model; the mask is then applied chunk by chunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from sofa_top.optimizers.depth_first.ops import Op, activation, module_params
from sofa_top.optimizers.depth_first.pool import workers as worker_pool

# One layer prepared for one call: ("bn", BatchNorm arguments), ("act", (name, params)),
# ("pool", forward), ("mul", dropout mask) or ("add", operand).
Step = tuple[str, Any]


@dataclass(frozen=True)
class _BNCall:
    running_mean: Tensor | None
    running_var: Tensor | None
    weight: Tensor | None
    bias: Tensor | None
    training: bool
    momentum: float
    eps: float


def plan_tile(
    shapes: list[tuple[int, ...]], itemsize: int, target: int, batch_split: bool
) -> tuple[int, int] | None:
    """(samples, channels) per chunk so that a chunk of every layer is about ``target`` bytes;
    None when the whole input fits in one chunk. ``batch_split=False`` keeps whole batches."""
    n, c = shapes[0][0], shapes[0][1]
    per_chan = max(math.prod(s[2:]) for s in shapes) * itemsize
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


# --------------------------------------------------------------------------- per-call steps


def prepare_steps(
    ops: list[Op], x: Tensor, sides: tuple[Any, ...], shapes: list[tuple[int, ...]]
) -> list[Step]:
    """Per-call preparation: BatchNorm arguments (bumping num_batches_tracked once),
    activation parameters, dropout masks; Identity and inactive dropout drop out."""
    masks = _dropout_masks(ops, x, shapes)
    steps: list[Step] = []
    for i, op in enumerate(ops):
        if op.kind == "bn":
            assert op.module is not None
            call = _bn_call(op.module)
            bn_args = (call.running_mean, call.running_var, call.weight, call.bias)
            steps.append(("bn", (*bn_args, call.training, call.momentum, call.eps)))
        elif op.kind == "act":
            assert op.act is not None
            params = op.act_params
            if op.module is not None:
                params = module_params(op.module, op.act)
            steps.append(("act", (op.act, params)))
        elif op.kind == "pool":
            assert op.module is not None
            steps.append(("pool", op.module.forward))
        elif op.kind == "dropout" and i in masks:
            steps.append(("mul", masks[i]))
        elif op.kind == "add":
            steps.append(("add", op.scalar if op.side is None else sides[op.side]))
    return steps


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


def _dropout_masks(ops: list[Op], x: Tensor, shapes: list[tuple[int, ...]]) -> dict[int, Tensor]:
    # Same RNG calls, in the same order, as F.dropout on the whole tensor (module docstring).
    masks: dict[int, Tensor] = {}
    for i, op in enumerate(ops):
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


# --------------------------------------------------------------------------- execution


def run_chunked(
    x: Tensor,
    steps: list[Step],
    out_shape: tuple[int, ...],
    tile: tuple[int, int],
    grad: bool,
    workers: int = 0,
) -> Tensor:
    """Run every ``tile``-sized chunk of ``x`` through all the steps before the next chunk.

    ``workers`` > 1 (no autograd only): that many threads, each with one intra-op thread,
    take chunks in turn, instead of every layer splitting each chunk across threads.
    """
    chunks = _Chunks(x, steps, tile, grad)
    if grad:
        return chunks.joined()
    out = x.new_empty(out_shape)

    def store(j: int) -> None:
        chunks.cut(out, j).copy_(chunks.run(j))

    if workers > 1 and len(chunks.jobs) > 1:
        jobs = list(range(len(chunks.jobs)))
        worker_pool(workers).map(jobs, store, torch.is_inference_mode_enabled())
    else:
        for j in range(len(chunks.jobs)):
            store(j)
    return out


class _Chunks:
    """One call's chunks of ``x``: jobs in order (rows of samples, then channel groups), and
    how each job's tile of ``x`` and of the side inputs runs through the steps."""

    def __init__(self, x: Tensor, steps: list[Step], tile: tuple[int, int], grad: bool) -> None:
        nb, nc = tile
        self.x, self.steps = x, steps
        self.n, self.c = n, c = x.shape[0], x.shape[1]
        self.scratch = not grad  # temporaries may be overwritten in place
        self.groups = [(c0, min(nc, c - c0)) for c0 in range(0, c, nc)]
        self.jobs = [
            (b0, min(nb, n - b0), g) for b0 in range(0, n, nb) for g in range(len(self.groups))
        ]
        # BatchNorm's per-channel tensors for each channel group, sliced once per call.
        self.bn_slices = [
            [
                tuple(_chan(v, c0, cl, c) for v in payload[:4])
                for kind, payload in steps
                if kind == "bn"
            ]
            for c0, cl in self.groups
        ]
        # Under autograd each narrow() view's backward would build a zero tensor of the full
        # input size (once per chunk); one split() has one backward that concatenates.
        self.split: dict[int, list[Tensor]] = {}
        if grad:
            self.split[id(x)] = _split_tiles(x, nb, nc)
            for _, payload in steps:
                if isinstance(payload, Tensor) and payload.requires_grad:
                    self.split[id(payload)] = _split_tiles(payload, nb, nc)

    def cut(self, t: Tensor, j: int) -> Tensor:
        """Job ``j``'s tile of ``t``: the input, a side input, a mask or the output."""
        tiles = self.split.get(id(t))
        if tiles is not None:
            return tiles[j]
        b0, bl, g = self.jobs[j]
        c0, cl = self.groups[g]
        if bl < self.n:
            t = t.narrow(0, b0, bl)
        if cl < self.c:
            t = t.narrow(1, c0, cl)
        return t

    def run(self, j: int) -> Tensor:
        """Job ``j``'s tile through every step."""
        _, bl, g = self.jobs[j]
        cl = self.groups[g][1]
        t = self.cut(self.x, j)
        own = False  # t is a temporary of ours, safe to overwrite
        if cl < self.c and bl > 1 and not t.is_contiguous():
            # A channel slice of several samples is strided; BatchNorm's kernel for strided
            # input reduces in another order, the contiguous one gives bit-identical
            # batch statistics.
            t = t.contiguous()
            own = True
        bn_slices = iter(self.bn_slices[g])
        for kind, payload in self.steps:
            t = self._step(kind, payload, t, j, own, bn_slices)
            own = True
        return t

    def _step(
        self,
        kind: str,
        payload: Any,
        t: Tensor,
        j: int,
        own: bool,
        bn_slices: Iterator[tuple[Tensor | None, ...]],
    ) -> Tensor:
        in_place = own and self.scratch
        if kind == "bn":
            mean, var, weight, bias = next(bn_slices)
            training, momentum, eps = payload[4:]
            return torch.batch_norm(t, weight, bias, mean, var, training, momentum, eps, False)
        if kind == "act":
            return activation(payload[0], payload[1], t, in_place)
        if kind == "pool":
            return payload(t)  # type: ignore[no-any-return]
        if kind == "mul":
            m = self.cut(payload, j) if payload.dim() else payload
            return t.mul_(m) if in_place else t * m
        if isinstance(payload, Tensor):  # add
            payload = self.cut(payload, j)
        return t.add_(payload) if in_place else t + payload

    def joined(self) -> Tensor:
        """Every job's output in turn, joined by ``torch.cat`` (differentiable)."""
        outs = [self.run(j) for j in range(len(self.jobs))]
        per_row = len(self.groups)
        rows = [
            outs[i] if per_row == 1 else torch.cat(outs[i : i + per_row], 1)
            for i in range(0, len(outs), per_row)
        ]
        return rows[0] if len(rows) == 1 else torch.cat(rows, 0)


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
