"""What the toggle installers share (``optimize`` and ``optimize_gpu``): the requested spec,
and how a toggle reports that it applied somewhere or why not, once per place or reason."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent import datacheck
from sofa_top.agent.toggles import OptimizeSpec, Toggle, hook_name

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent, Installer


def default_workers() -> int:
    """DataLoader workers: the cores this process may use, less one for the loop, at least 2."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(2, cores - 1)


class State:
    """What the installers share; one process has one agent."""

    agent: Agent | None = None
    wanted: OptimizeSpec = OptimizeSpec()
    where: dict[str, list[str]] = {}
    top_module_hook: Any = None
    reported: set[tuple[str, str]] = set()  # (toggle, reason) skips already reported
    shards: dict[int, tuple[Any, bool, str]] = {}  # id(dataset) -> (dataset, shards, why)
    check: datacheck.DataCheck | None = None


def patch(obj: Any, name: str, value: Any) -> None:
    """``setattr(obj, name, value)`` through the agent's ``Patches`` (undone at detach)."""
    agent = State.agent
    if agent is None:
        raise RuntimeError("no agent: the toggles' installers run under one")
    agent.patches.set(obj, name, value)


def on_detach(what: str, undo: Callable[[], None]) -> None:
    """Register an undo step with the agent's ``Patches``."""
    agent = State.agent
    if agent is not None:
        agent.patches.on_detach(what, undo)


def applied(toggle: Toggle, where: str, **data: Any) -> None:
    """Report that ``toggle`` changed something (``where``), once per distinct place."""
    agent = State.agent
    places = State.where.setdefault(toggle, [])
    if agent is None or where in places:
        return
    places.append(where)
    agent.hook_applied(hook_name(toggle))
    agent.event(
        "optimize",
        f"{toggle}: {where}",
        {"toggle": toggle, "applied": True, "where": where, "reason": None, **data},
    )


def skipped(toggle: Toggle, reason: str, **data: Any) -> None:
    """Report that ``toggle`` did not change something; ``data`` says why in typed form
    (``blocked``: a kind of obstacle compare knows the code change for)."""
    agent = State.agent
    if agent is None or State.where.get(toggle) or (toggle, reason) in State.reported:
        return  # applied somewhere already (a miss elsewhere does not undo it), or said
    State.reported.add((toggle, reason))
    agent.hook_skipped(hook_name(toggle), reason)
    agent.event(
        "optimize",
        f"{toggle} not applied: {reason}",
        {"toggle": toggle, "applied": False, "where": None, "reason": reason, **data},
    )


def check_guard(fn: Callable[[Agent, ModuleType], None]) -> Installer:
    """``fn`` as an installer whose failure is an event, never the workload's problem."""

    def install(agent: Agent, module: ModuleType) -> None:
        try:
            fn(agent, module)
        except Exception as e:  # the check is compare's, never the workload's problem
            agent.event("optimize", f"data check not installed: {e!r}", {"toggle": None})

    return install


def guard(toggle: Toggle, fn: Callable[[Agent, ModuleType], None]) -> Installer:
    """``fn`` as an installer whose failure reports ``toggle`` skipped."""

    def install(agent: Agent, module: ModuleType) -> None:
        try:
            fn(agent, module)
        except Exception as e:  # never fail the workload for an optimization
            skipped(toggle, f"install failed: {e!r}")

    return install


def bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn``'s signature bound to ``args`` and ``kwargs`` (TypeError if they do not fit)."""
    import inspect

    return inspect.signature(fn).bind(*args, **kwargs)
