"""Attach mode: make the hooks take hold of work that was already running when the agent came.

Patching a class reaches iterators already being iterated at their next ``next()`` (a ``for``
loop looks ``__next__`` up on the type each time), so tf.data and DataLoader loops need nothing
more, except that their pipeline was never walked (its ``__iter__`` ran before the agent): the
step clocks adopt such an iterator at its first timed fetch (``_adopting``). A Keras ``fit``
already inside an epoch holds its ``train_function`` on the model: the running ``fit`` frames
are found and their trainer's function wrapped, which takes effect at the next step. Stdlib only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

from sofa_top.agent import clocks, hooks_tf
from sofa_top.agent.core import Agent

_MAX_DEPTH = 200  # frames walked per thread


def adopt(agent: Agent) -> None:
    """Hook what is already running (see the module docstring); failures are reported."""
    try:
        for source in (clocks.TF_EAGER, clocks.KERAS_FIT):
            clock = agent.clock(source)
            clock.resolve_batch_size = _adopting(agent, clock.resolve_batch_size)
        trainers = running_keras_trainers()
        for trainer in trainers:
            make = getattr(type(trainer), "make_train_function", None)
            if make is not None and hasattr(make, "__wrapped__"):
                make(trainer)  # already built: returns it, and our wrapper wraps it
        if trainers and clocks.KERAS_FIT not in agent._applied:
            agent.event(
                "agent-error",
                "a running Keras fit could not be hooked mid-run: "
                + dict(agent._skipped).get(clocks.KERAS_FIT, "unknown reason"),
                {"hook": clocks.KERAS_FIT},
            )
    except Exception as e:
        agent.event("agent-error", f"mid-run hooks failed: {e!r}; stacks-based verdict stays")


def _adopting(
    agent: Agent, resolve: Callable[[object], int | None] | None
) -> Callable[[object], int | None]:
    """A batch-size resolver that first adopts a tf.data iterator created before the agent."""

    def adopt_iterator(it: object) -> int | None:
        owned = hooks_tf._State.owned_cls
        if owned is not None and type(it) is owned and id(it) not in hooks_tf._State.batch_sizes:
            dataset = getattr(it, "_dataset", None)
            if dataset is not None:
                hooks_tf._new_iterator(agent, dataset, it)
        return None if resolve is None else resolve(it)

    return adopt_iterator


def running_keras_trainers() -> list[object]:
    """The models whose ``fit`` is on some thread's stack right now (innermost first)."""
    trainer_cls = _keras_trainer_class()
    if trainer_cls is None:
        return []
    found: list[object] = []
    for frame in sys._current_frames().values():
        f: FrameType | None = frame
        depth = 0
        while f is not None and depth < _MAX_DEPTH:
            if f.f_code.co_name == "fit":
                me = f.f_locals.get("self")
                if isinstance(me, trainer_cls) and all(me is not x for x in found):
                    found.append(me)
            f = f.f_back
            depth += 1
    return found


def _keras_trainer_class() -> type | None:
    mod = sys.modules.get("keras.src.backend.tensorflow.trainer")
    cls = getattr(mod, "TensorFlowTrainer", None)
    return cls if isinstance(cls, type) else None
