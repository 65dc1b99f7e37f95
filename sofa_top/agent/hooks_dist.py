"""torch.distributed hooks: the time a step spends waiting for the other ranks (stdlib at import).

Both add to ``Agent.collective_s``; each step record carries what was added since the last
one (``Agent.push``), so every step says how long it was blocked in collectives.

torch-collectives
    Installed when ``torch.distributed.distributed_c10d`` has been imported (``import torch``
    does it, before the workload's own code runs). The synchronous collectives (``all_reduce``,
    ``broadcast``, ``barrier``, ``all_gather``, ...) are wrapped: the time inside a call that
    returns no work handle is collective wait; a call with ``async_op=True`` returns at once
    and its wait is the time inside ``Work.wait()``, which is wrapped too. Nested calls
    (``all_gather_object`` calls ``all_gather``) count once. The module-level functions are
    replaced before ``torch.distributed`` copies them, so ``dist.all_reduce`` is covered.

torch-ddp
    ``DistributedDataParallel`` all-reduces gradients in C++ (its reducer), bucket by bucket
    while backward still runs, then blocks at the end of ``backward()`` until every bucket's
    all-reduce has completed. That block is what a fast rank pays for a slow one. Each DDP
    model's parameters get a post-accumulate-grad hook that stamps the time (the last stamp is
    the end of the gradient computation) and ``torch.autograd.backward`` is wrapped: the time
    from the last stamp to its return is collective wait. The all-reduce itself is not touched:
    the default one and a communication hook the user registered run exactly as they would.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent.core import Agent, HookSkipped

# The collectives of torch.distributed that block (unless async_op=True) until all ranks joined.
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)


class _Depth(threading.local):
    """How deep the current thread is in timed collectives (only the outermost counts)."""

    n = 0


_depth = _Depth()


def _timed(agent: Agent, fn: Callable[..., Any]) -> Callable[..., Any]:
    perf = time.perf_counter

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        if not agent.enabled or _depth.n:
            return fn(*args, **kwargs)
        _depth.n += 1
        t0 = perf()
        try:
            result = fn(*args, **kwargs)
        finally:
            _depth.n -= 1
        if result is None:  # an async call returns its work handle: its wait() is timed
            try:
                agent.add_collective(perf() - t0)
            except Exception as e:
                agent.fail("the torch-collectives hook", e)
        return result

    return collective


def _timed_wait(agent: Agent, orig: Callable[..., Any]) -> Callable[..., Any]:
    perf = time.perf_counter

    @functools.wraps(orig)
    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not agent.enabled or _depth.n:
            return orig(self, *args, **kwargs)
        _depth.n += 1
        t0 = perf()
        try:
            return orig(self, *args, **kwargs)
        finally:
            _depth.n -= 1
            try:
                agent.add_collective(perf() - t0)
            except Exception as e:
                agent.fail("the torch-collectives hook", e)

    return wait


def install_collectives(agent: Agent, module: ModuleType) -> None:
    """Time the blocking collectives of ``torch.distributed.distributed_c10d``."""
    names = [n for n in COLLECTIVES if callable(getattr(module, n, None))]
    if not names:
        raise HookSkipped("torch.distributed has no collectives in this build")
    for name in names:
        orig = getattr(module, name)
        wrapper = _timed(agent, orig)
        agent.patches.set(module, name, wrapper)
        # torch.distributed copies these when it is imported: a copy of ours goes back too
        agent.patches.on_detach(f"torch.distributed.{name}", _unshadow(name, wrapper, orig))
    work = getattr(module, "Work", None)
    orig_wait = getattr(work, "wait", None)
    if work is not None and callable(orig_wait):
        # a build whose Work type is closed: the blocking collectives are still timed
        with contextlib.suppress(AttributeError, TypeError):
            agent.patches.set(work, "wait", _timed_wait(agent, orig_wait))
    agent.hook_applied("torch-collectives")


def _unshadow(name: str, wrapper: object, orig: object) -> Callable[[], None]:
    def undo() -> None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and getattr(dist, name, None) is wrapper:
            setattr(dist, name, orig)

    return undo


class _Backward:
    """The end of the gradient computation of the backward pass in progress."""

    last_grad = 0.0
    wrapped = False

    @classmethod
    def forget(cls) -> None:
        """At detach: a later agent wraps ``backward`` afresh."""
        cls.wrapped = False


def _stamp(_param: object) -> None:
    _Backward.last_grad = time.perf_counter()


def _wrap_backward(agent: Agent, autograd: ModuleType) -> None:
    orig: Callable[..., Any] = autograd.backward
    perf = time.perf_counter

    @functools.wraps(orig)
    def backward(*args: Any, **kwargs: Any) -> Any:
        if not agent.enabled:
            return orig(*args, **kwargs)
        _Backward.last_grad = 0.0
        result = orig(*args, **kwargs)
        end = perf()
        last = _Backward.last_grad
        if last:  # a DDP model's gradients were ready at `last`; the rest was the reducer's wait
            try:
                agent.add_collective(max(0.0, end - last))
            except Exception as e:
                agent.fail("the torch-ddp hook", e)
        return result

    agent.patches.set(autograd, "backward", backward)


def _watch(agent: Agent, ddp: Any) -> None:
    autograd = sys.modules.get("torch.autograd")
    if autograd is None or not callable(getattr(autograd, "backward", None)):
        agent.hook_skipped("torch-ddp", "torch.autograd.backward not found")
        return
    params = [p for p in ddp.module.parameters() if p.requires_grad]
    if params and not hasattr(params[0], "register_post_accumulate_grad_hook"):
        agent.hook_skipped("torch-ddp", "this torch has no register_post_accumulate_grad_hook")
        return
    handles = [p.register_post_accumulate_grad_hook(_stamp) for p in params]

    def remove() -> None:
        for h in handles:
            h.remove()

    agent.patches.on_detach("DDP gradient hooks", remove)
    if not _Backward.wrapped:
        _Backward.wrapped = True
        agent.patches.on_detach("torch.autograd.backward watch", _Backward.forget)
        _wrap_backward(agent, autograd)


def install_ddp(agent: Agent, module: ModuleType) -> None:
    """Watch every ``DistributedDataParallel`` built from now on (torch.nn.parallel.distributed)."""
    cls = getattr(module, "DistributedDataParallel", None)
    if cls is None:
        raise HookSkipped("torch DistributedDataParallel not found in this torch")
    orig_init: Callable[..., None] = cls.__init__

    @functools.wraps(orig_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        if agent.enabled:
            try:
                _watch(agent, self)
            except Exception as e:
                agent.fail("the torch-ddp hook", e)

    agent.patches.set(cls, "__init__", __init__)
    agent.hook_applied("torch-ddp")
