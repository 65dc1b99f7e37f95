"""The transform: walk the module tree and rewrite forwards so each run is one call.

A module with runs gets an instance ``forward`` (the fx code with each chain collapsed into
one call, or a loop over the Sequential's segments) and keeps its runs in its instance
``__dict__``: they are not child modules, so parameters, buffers, ``state_dict`` keys and
``named_modules`` stay as they were.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.fx as fx
from torch import nn

from sofa_top.optimizers.cache import default_chunk_bytes
from sofa_top.optimizers.depth_first.discovery import (
    RUN_PREFIX,
    find_chains,
    sequential_segments,
    trace,
)
from sofa_top.optimizers.depth_first.ops import run_name
from sofa_top.optimizers.depth_first.options import Options
from sofa_top.optimizers.depth_first.report import RunReport
from sofa_top.optimizers.depth_first.run import Run

M = TypeVar("M", bound=nn.Module)

_RUNS_ATTR = "_depth_first_runs"
_SEGMENTS_ATTR = "_depth_first_segments"


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
    opts = Options(chunk_bytes, tune, min_speedup, default_chunk_bytes(), use_fx, parallel_chunks)
    _transform(model, "", opts, set())
    return model


def depth_first_report(model: nn.Module) -> list[RunReport]:
    """The runs :func:`depth_first` found in ``model``, with each input signature's decision."""
    reports: list[RunReport] = []
    for m in model.modules():
        for run in m.__dict__.get(_RUNS_ATTR, []):
            reports.append(run.report())
    return reports


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


def _transform(module: nn.Module, prefix: str, opts: Options, seen: set[int]) -> None:
    if id(module) in seen:
        return
    seen.add(id(module))
    already = "forward" in module.__dict__  # rewritten before (by us or someone else)
    is_seq = isinstance(module, nn.Sequential)
    if not already and (is_seq or not _is_torch_builtin(module)):
        runs: list[Run] | None = None
        if opts.use_fx:
            runs = _rewrite_fx(module, prefix, opts)
        if runs is None and is_seq:
            assert isinstance(module, nn.Sequential)
            runs = _rewrite_sequential(module, prefix, opts)
        if runs:
            module.__dict__[_RUNS_ATTR] = runs
    for name, child in module.named_children():
        _transform(child, f"{prefix}{name}.", opts, seen)


def _is_torch_builtin(m: nn.Module) -> bool:
    return type(m).__module__.startswith(("torch.nn.", "torch.ao.nn."))


def _rewrite_fx(module: nn.Module, prefix: str, opts: Options) -> list[Run] | None:
    """Collapse each chain of the module's fx graph into one run; None if it cannot be traced."""
    gm = trace(module)
    if gm is None:
        return None
    chains = find_chains(gm.graph, module, prefix)
    runs: list[Run] = []
    graph = gm.graph
    # A later run may read an earlier run's output, whose tail node is erased below.
    replaced: dict[fx.Node, fx.Node] = {}
    for i, chain in enumerate(chains):
        attr = f"{RUN_PREFIX}{i}"
        run = Run(run_name(chain.ops), chain.ops, len(chain.sides), "fx", opts)
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


def _rewrite_sequential(seq: nn.Sequential, prefix: str, opts: Options) -> list[Run]:
    """Replace each group of consecutive eligible children by one run (no fx needed)."""
    segments: list[Callable[[Any], Any]] = []
    runs: list[Run] = []
    for segment in sequential_segments(seq, prefix):
        if isinstance(segment, nn.Module):
            segments.append(segment)
        else:
            run = Run(run_name(segment), segment, 0, "sequential", opts)
            segments.append(run)
            runs.append(run)
    if runs:
        seq.__dict__[_SEGMENTS_ATTR] = segments
        seq.__dict__["forward"] = types.MethodType(_sequential_forward, seq)
    return runs


def _sequential_forward(self: nn.Sequential, input: Any) -> Any:
    for item in self.__dict__[_SEGMENTS_ATTR]:
        input = item(input)
    return input
