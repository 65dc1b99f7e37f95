"""How many chains ``depth_first`` would take in a model, without changing it.

The agent asks this on the first model a workload runs, so that sofa-top suggests depth-first
only where it can apply (an LSTM, a Transformer built from torch's own layers, or a stack of
Linear layers has no run of memory-bound layers). It walks the module tree as the transform
does (user-defined modules and ``nn.Sequential`` traced one level deep with fx, falling back to
the Sequential's children) but rewrites nothing; it stops at ``budget_s``. A shallow fx trace
runs the module's own forward once on proxies: what that forward prints is discarded.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass

from torch import nn

from sofa_top.optimizers.depth_first.discovery import find_chains, sequential_segments, trace
from sofa_top.optimizers.depth_first.transform import _is_torch_builtin


@dataclass(frozen=True)
class ChainCount:
    """Chains found, modules looked at, and whether the budget ran out first."""

    chains: int
    modules: int
    complete: bool


def count_chains(model: nn.Module, budget_s: float = 0.5) -> ChainCount:
    """The chains ``depth_first(model)`` would rewrite (a lower bound when not ``complete``)."""
    deadline = time.perf_counter() + budget_s
    chains = modules = 0
    seen: set[int] = set()
    todo: list[tuple[str, nn.Module]] = [("", model)]
    sink = io.StringIO()
    while todo:
        if time.perf_counter() > deadline:
            return ChainCount(chains, modules, False)
        prefix, module = todo.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        is_seq = isinstance(module, nn.Sequential)
        if "forward" not in module.__dict__ and (is_seq or not _is_torch_builtin(module)):
            modules += 1
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                gm = trace(module)
            if gm is not None:
                chains += len(find_chains(gm.graph, module, prefix))
            elif is_seq:
                assert isinstance(module, nn.Sequential)
                segments = sequential_segments(module, prefix)
                chains += sum(1 for seg in segments if isinstance(seg, list))
        todo.extend((f"{prefix}{name}.", child) for name, child in module.named_children())
    return ChainCount(chains, modules, True)
