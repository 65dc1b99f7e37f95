"""PyTorch hooks (stdlib only at import; torch is only touched once the workload loaded it).

torch-dataloader
    ``_BaseDataLoaderIter.__next__`` is wrapped: time inside it is input wait, consecutive
    returns are step boundaries (``core.StepClock``). On each new iterator the loader's shape is
    reported as a pipeline (dataset, batching, worker prefetch) and, with ``num_workers > 0``,
    the worker pids (``_workers``) so that sofa-top can label those processes.

torch-optimizer
    Where no DataLoader is used, a global ``register_optimizer_step_post_hook`` marks a step
    boundary after each ``step()`` of the first optimizer seen (input wait unknown: 0). Once a
    DataLoader has been iterated, its clock wins and optimizer steps are not reported.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent.core import Agent, HookSkipped, timed_next


class _State:
    dataloader_seen = False
    first_optimizer: Callable[[], object] | None = None
    workers_sent: set[tuple[int, ...]] = set()
    pipelines_sent: set[int] = set()


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
            # with no workers every __getitem__ runs on the training loop's own thread
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
        note += "; batches are loaded on the training loop's thread"
    return stages, note


def _new_iterator(agent: Agent, it: Any) -> None:
    _State.dataloader_seen = True
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
    clock = agent.clock("torch-dataloader")
    clock.resolve_batch_size = _batch_size

    def after_fetch(it: Any, new: bool, _t1: float) -> None:
        if new:
            _new_iterator(agent, it)

    cls.__next__ = timed_next(agent, "torch-dataloader", orig, clock, after_fetch)
    agent.hook_applied("torch-dataloader")


def install_optimizer(agent: Agent, module: ModuleType) -> None:
    """Register a global optimizer step post-hook (torch.optim.optimizer)."""
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is None:
        raise HookSkipped("torch.optim has no register_optimizer_step_post_hook")
    clock = agent.clock("torch-optimizer")
    perf = time.perf_counter

    def hook(optimizer: object, args: object, kwargs: object) -> None:
        if not agent.enabled or _State.dataloader_seen:
            return
        try:
            first = _State.first_optimizer
            current = None if first is None else first()
            if current is None:
                _State.first_optimizer = weakref.ref(optimizer)
            elif current is not optimizer:
                return  # several optimizers per iteration (e.g. a GAN): count one of them
            clock.tick(perf())
        except Exception as e:
            agent.fail("the torch-optimizer hook", e)

    register(hook)
    agent.hook_applied("torch-optimizer")
