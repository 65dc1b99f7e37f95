"""PyTorch hooks (stdlib only at import; torch is only touched once the workload loaded it).

A training loop's steps can be marked by three clocks; ``loops.TorchLoop`` decides, by what
the loop does, which one marks them (see there):

torch-dataloader
    ``_BaseDataLoaderIter.__next__`` is wrapped: time inside it is input wait, consecutive
    returns are step boundaries (``core.StepClock``). On each new iterator the loader's shape is
    reported as a pipeline (dataset, batching, worker prefetch) and, with ``num_workers > 0``,
    the worker pids (``_workers``) so that sofa-top can label those processes.

torch-optimizer
    Global ``register_optimizer_step_pre_hook`` / ``..._post_hook``: a step boundary after each
    ``step()`` of the loop's lead optimizer, while no DataLoader feeds the loop (input wait not
    measured: 0). One ``step(closure)`` (LBFGS) is one step, however often the closure runs.

torch-backward
    ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped: a boundary after
    each outermost backward outside an optimizer step, for loops that update their weights by
    hand (``p.data.add_(p.grad, alpha=-lr)``) and feed themselves without a DataLoader.

Above the optimizer and backward clocks, the model-call clock (``model_loop``, ``hooks_model``)
marks a loop whose model it sees called once per iteration. Backward passes, optimizer steps and
``zero_grad`` are also timed as the step's compute spans (``spans``): the compute split, and
what the model-call clock takes out of a step to leave its host time.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent import clocks, model_loop
from sofa_top.agent.core import Agent, HookSkipped, timed_next
from sofa_top.agent.loops import TorchLoop
from sofa_top.agent.spans import BACKWARD, OPTIMIZER, TRAIN


class _State:
    workers_sent: set[tuple[int, ...]] = set()
    pipelines_sent: set[int] = set()


def _loop(agent: Agent) -> TorchLoop:
    return model_loop.loops(agent)[1]


def _batch_size(it: object) -> int | None:
    if not getattr(it, "_auto_collation", False):
        return None
    bs = getattr(getattr(it, "_index_sampler", None), "batch_size", None)
    return bs if isinstance(bs, int) and not isinstance(bs, bool) else None


def loader_stages(it: Any) -> tuple[list[dict[str, Any]], str]:
    """Describe a DataLoader iterator as pipeline stages (loading first, as it runs)."""
    workers = int(getattr(it, "_num_workers", 0) or 0)
    dataset = getattr(it, "_dataset", None)
    # _DatasetKind.Iterable is 1: an IterableDataset, which workers duplicate unless it shards
    iterable = getattr(it, "_dataset_kind", 0) == 1
    stages: list[dict[str, Any]] = [
        {
            "name": type(dataset).__name__,
            "kind": "iterable" if iterable else "source",
            "parallelism": max(workers, 1),
            "buffer": None,
            "self_time_s": None,
            # with no workers every __getitem__ runs on the loop's own thread
            "is_bottleneck": workers == 0,
        }
    ]
    bs = _batch_size(it)
    if bs is not None:
        stages.append(
            {
                "name": type(getattr(it, "_index_sampler", None)).__name__,
                "kind": "batch",
                "parallelism": None,
                "buffer": bs,
                "self_time_s": None,
                "is_bottleneck": False,
            }
        )
    if workers > 0:
        pf = getattr(it, "_prefetch_factor", None)
        stages.append(
            {
                "name": "worker prefetch",
                "kind": "prefetch",
                "parallelism": workers,
                "buffer": pf * workers if isinstance(pf, int) else None,
                "self_time_s": None,
                "is_bottleneck": False,
            }
        )
    if getattr(it, "_pin_memory", False):
        stages.append(
            {
                "name": "pin_memory",
                "kind": "other",
                "parallelism": 1,
                "buffer": None,
                "self_time_s": None,
                "is_bottleneck": False,
            }
        )
    note = f"DataLoader num_workers={workers}, batch_size={bs}"
    if workers == 0:
        note += "; batches are loaded on the loop's thread"
    return stages, note


def _new_iterator(agent: Agent, it: Any) -> None:
    key = id(getattr(it, "_dataset", None))
    if key not in _State.pipelines_sent:
        _State.pipelines_sent.add(key)
        stages, note = loader_stages(it)
        agent.send_frame({"type": "pipeline", "framework": "torch", "note": note, "stages": stages})
    procs = getattr(it, "_workers", None)
    if procs:
        pids = tuple(int(p.pid) for p in procs if getattr(p, "pid", None))
        if pids and pids not in _State.workers_sent:
            _State.workers_sent.add(pids)
            agent.send_frame({"type": "workers", "framework": "torch", "workers": list(pids)})


def install_dataloader(agent: Agent, module: ModuleType) -> None:
    """Wrap ``_BaseDataLoaderIter.__next__`` (torch.utils.data.dataloader)."""
    cls = getattr(module, "_BaseDataLoaderIter", None)
    if cls is None or not hasattr(cls, "__next__"):
        raise HookSkipped("torch _BaseDataLoaderIter not found in this torch")
    orig: Callable[[Any], Any] = cls.__next__
    clock = agent.clock(clocks.TORCH_DATALOADER)
    clock.resolve_batch_size = _batch_size
    loop = _loop(agent)

    def after_fetch(it: Any, new: bool, _t1: float) -> None:
        loop.fetched()
        if new:
            _new_iterator(agent, it)

    agent.patches.set(
        cls, "__next__", timed_next(agent, clocks.TORCH_DATALOADER, orig, clock, after_fetch)
    )
    agent.hook_applied(clocks.TORCH_DATALOADER)


def install_optimizer(agent: Agent, module: ModuleType) -> None:
    """Register global optimizer step pre/post hooks (torch.optim.optimizer)."""
    register_pre = getattr(module, "register_optimizer_step_pre_hook", None)
    register_post = getattr(module, "register_optimizer_step_post_hook", None)
    if register_pre is None or register_post is None:
        raise HookSkipped("torch.optim has no register_optimizer_step_pre/post_hook")
    loop = _loop(agent)
    perf = time.perf_counter
    spans = agent.spans
    # the outermost step() being timed (an optimizer that steps another inside is one span)
    span: list[tuple[float, float, float]] = []

    def pre(optimizer: object, args: Any, kwargs: Any) -> None:
        if agent.enabled:
            try:
                # torch passes step()'s own args, self first: step(closure) has a second
                closure = (len(args) > 1 and args[1] is not None) or (
                    kwargs.get("closure") is not None
                )
                span.append(spans.start(agent.collective_s))
                loop.optimizer_started(perf(), closure)
            except Exception as e:
                agent.fail("the torch-optimizer hook", e)

    def post(optimizer: object, args: object, kwargs: object) -> None:
        if agent.enabled:
            try:
                if span:
                    start = span.pop()
                    if not span:
                        spans.end(OPTIMIZER, start, agent.collective_s, TRAIN)
                loop.optimizer_stepped(optimizer, perf())
            except Exception as e:
                agent.fail("the torch-optimizer hook", e)

    agent.patches.on_detach("the optimizer step pre-hook", register_pre(pre).remove)
    agent.patches.on_detach("the optimizer step post-hook", register_post(post).remove)
    cls = getattr(module, "Optimizer", None)
    if isinstance(cls, type) and callable(getattr(cls, "zero_grad", None)):
        time_zero_grad(agent, cls)
    agent.hook_applied(clocks.TORCH_OPTIMIZER)


def time_zero_grad(agent: Agent, owner: type) -> None:
    """Time ``owner.zero_grad`` as optimizer work (a step's compute, not its host time)."""
    orig: Callable[..., Any] = owner.zero_grad  # type: ignore[attr-defined]
    spans = agent.spans

    @functools.wraps(orig)
    def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not agent.enabled:
            return orig(self, *args, **kwargs)
        start = spans.start(agent.collective_s)
        try:
            return orig(self, *args, **kwargs)
        finally:
            spans.end(OPTIMIZER, start, agent.collective_s, ends_compute=False)

    agent.patches.set(owner, "zero_grad", zero_grad)


def install_backward(agent: Agent, module: ModuleType) -> None:
    """Wrap ``torch.autograd.backward`` (torch.autograd), which ``Tensor.backward`` calls."""
    orig = getattr(module, "backward", None)
    if orig is None or not callable(orig):
        raise HookSkipped("torch.autograd.backward not found")
    loop = _loop(agent)
    perf = time.perf_counter
    spans = agent.spans
    depth = [0]  # nested backward calls (reentrant checkpointing) end no step

    def compiling() -> bool:
        compiler = getattr(sys.modules.get("torch"), "compiler", None)
        check = getattr(compiler, "is_compiling", None)
        return bool(check()) if check is not None else False

    @functools.wraps(orig)
    def backward(*args: Any, **kwargs: Any) -> Any:
        if not agent.enabled or compiling():
            return orig(*args, **kwargs)
        start = spans.start(agent.collective_s) if depth[0] == 0 else None
        depth[0] += 1
        try:
            result = orig(*args, **kwargs)
        finally:
            depth[0] -= 1
        if start is not None:
            try:
                spans.end(BACKWARD, start, agent.collective_s, TRAIN)
                loop.backward_done(perf())
            except Exception as e:
                agent.fail("the torch-backward hook", e)
        return result

    agent.patches.set(module, "backward", backward)
    agent.hook_applied(clocks.TORCH_BACKWARD)
