"""Explicit step marks for loops no hook can see (plain Python, custom frameworks).

Usable from any interpreter that ``sofa-top launch`` started, even one without sofa-top
installed (the injected ``sitecustomize`` makes ``sofa_top.agent`` importable); every function
is a no-op when no agent is running::

    try:
        from sofa_top.agent import api
    except ImportError:
        api = None
    for batch in (api.iterate(loader) if api else loader):
        train(batch)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from sofa_top.agent import clocks, core
from sofa_top.agent.sched import thread_sched, wait_times

T = TypeVar("T")


def active() -> bool:
    """Whether an agent is running and connected in this process."""
    agent = core.AGENT
    return agent is not None and agent.enabled


def iterate(
    iterable: Iterable[T], source: str = clocks.PYTHON, batch_size: int | None = None
) -> Iterator[T]:
    """Yield from ``iterable``, timing each fetch as input wait; consecutive fetches are steps.
    ``source``: the loop's name (the ``python`` clock's steps, ``StepSample.name``)."""
    agent = core.AGENT
    it = iter(iterable)
    if agent is None or not agent.enabled:
        yield from it
        return
    clock = agent.clock(source)
    if batch_size is not None:
        clock.resolve_batch_size = lambda _it: batch_size
    perf = time.perf_counter
    cpu = time.process_time
    sched = thread_sched
    while True:
        t0 = perf()  # the wall clock outside the CPU clock (see core.timed_next)
        c0 = cpu()
        s0 = sched()
        try:
            item = next(it)
        except StopIteration:
            if agent.enabled:
                s1 = sched()
                c1 = cpu()
                clock.exhausted(it, t0, perf(), wait_times(c1 - c0, s0, s1))
            return
        if agent.enabled:
            s1 = sched()
            c1 = cpu()
            t1 = perf()
            clock.fetched(it, t0, t1, wait_times(c1 - c0, s0, s1))
        yield item


def mark_step(source: str = clocks.PYTHON) -> None:
    """Mark the end of one step (no input wait known); the first call only starts the clock."""
    agent = core.AGENT
    if agent is not None and agent.enabled:
        agent.clock(source).tick(time.perf_counter())
