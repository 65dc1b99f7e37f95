"""Keras ``fit`` hooks (Keras 3, TensorFlow backend; stdlib only at import).

keras-fit
    ``model.fit`` hands the tf.data iterator to a compiled function that calls ``get_next()``
    in the graph, so no Python code ever sees the wait. ``make_train_function`` is wrapped, and
    the train function it makes is measured without changing what Keras traces: its compiled
    function still pulls each batch with the iterator's ``get_next()``, in the graph, with the
    dataset's own (maybe unknown) shapes. Only the step function of Keras' closure is wrapped,
    before it is first traced: the ``one_step_on_data`` it calls is replaced by one that takes
    ``tf.timestamp()`` when its batch is ready and when its step is done, and adds
    ``max(0, ready_k - done_(k-1))`` -- the time step ``k`` waited for its batch -- to a small
    variable (``ExecutionTimer``). Python never writes it: it reads it once per execution, and
    takes from the first step's wait the time between the previous execution's end and this
    one's start (Keras' Python between executions: callbacks, logs), which it knows.

    ``steps_per_execution == 1`` (the default): one step per execution; its wait is exact.
    ``steps_per_execution = N > 1``: Keras runs N steps in one compiled ``tf.while_loop``, and
    the fetch of batch ``k + 1`` runs *concurrently* with the compute of batch ``k``
    (automatic control dependencies order ops per resource: the iterator and the variables
    are different); the timer leaves that overlap as it is. Per-step numbers are the
    execution's divided by its steps (said in ``step_notes``).

    There is no CPU reading of the wait (it happens inside the graph): the input cause then
    comes from the process tree's CPU. Cost: 2 timestamp ops and a variable update per step,
    one variable read per execution (``tests/agent/bench_overhead.py``,
    ``benchmarks/keras_spe.py``).

    A fit whose train function was traced before the agent came (attach mode, mid-epoch)
    cannot get the timer without a retrace; with ``steps_per_execution == 1`` its batches are
    fetched eagerly with the (unwrapped) ``OwnedIterator.__next__`` and handed to the same
    compiled ``one_step_on_data``, whose trace (made by Keras for the dataset's element spec)
    accepts every batch of the dataset. Other settings (a distribution strategy, batches that
    do not come from a tf.data iterator, a Keras without ``one_step_on_data`` in its closure)
    are reported as skipped rather than guessed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent import clocks, hooks_tf, keras_timer
from sofa_top.agent.core import Agent, HookSkipped
from sofa_top.agent.keras_timer import ExecutionTimer


class _State:
    reason: str | None = "not installed"  # why keras-fit does not apply (None: it does)


def _status(agent: Agent, reason: str | None) -> None:
    if reason == _State.reason:
        return
    _State.reason = reason
    if reason is None:
        agent.hook_applied(clocks.KERAS_FIT)
    else:
        agent.hook_skipped(clocks.KERAS_FIT, reason)


def _closure_cell(fn: Callable[..., Any], name: str) -> Any:
    """The closure cell of ``fn`` that holds ``name``, or None."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None)
    if code is None or not cells:
        return None
    for i, var in enumerate(code.co_freevars):
        if var == name and i < len(cells):
            return cells[i]
    return None


def _traced(fn: Callable[..., Any]) -> bool:
    """Whether Keras' compiled ``multi_step_on_iterator`` of ``fn`` was traced already."""
    cell = _closure_cell(fn, "multi_step_on_iterator")
    count = getattr(
        cell.cell_contents if cell is not None else None, "experimental_get_tracing_count", None
    )
    try:
        return bool(count is not None and count() > 0)
    except Exception:
        return True  # unknown: do not rely on a timer that may never run


def install_keras(agent: Agent, module: ModuleType) -> None:
    """Wrap ``TensorFlowTrainer.make_train_function`` (keras.src.backend.tensorflow.trainer)."""
    cls = getattr(module, "TensorFlowTrainer", None)
    orig_make = getattr(cls, "make_train_function", None)
    if cls is None or orig_make is None:
        raise HookSkipped("keras TensorFlowTrainer.make_train_function not found")
    clock = agent.clock(clocks.KERAS_FIT)
    clock.resolve_batch_size = hooks_tf.resolve_batch_size
    perf = time.perf_counter

    def after_step(iterator: Any, t2: float) -> None:
        if t2 >= hooks_tf.stats_due():
            hooks_tf.maybe_pull_stats(agent, iterator, t2)
        _status(agent, None)

    def timed(timer: ExecutionTimer, fn: Callable[[Any], Any], iterator: Any) -> Any:
        t0 = perf()
        try:
            started = timer.begin()
        except Exception as e:
            agent.fail("the keras-fit hook", e)
            return fn(iterator)
        try:
            outputs = fn(iterator)
        except BaseException:
            try:  # the executions before this one, then a fresh start
                timer.flush()
                clock.reset()
            except Exception as e:
                agent.fail("the keras-fit hook", e)
            raise
        t2 = perf()
        try:
            timer.end(iterator, t0, t2, started)
            after_step(iterator, t2)
        except Exception as e:
            agent.fail("the keras-fit hook", e)
        return outputs

    def eager_step(fn: Callable[[Any], Any], iterator: Any, fetch: Any) -> Any:
        t0 = perf()  # the wall clock outside the CPU clock (see core.timed_next)
        c0 = time.process_time()
        try:
            data = fetch(iterator)
        except StopIteration:
            clock.reset()
            raise
        wait_cpu = time.process_time() - c0
        t1 = perf()
        # a tuple is not an iterator: Keras runs its compiled one_step_on_data(batch)
        outputs = fn((data,))
        t2 = perf()
        try:
            clock.span(iterator, t0, t1, t2, wait_cpu)
            after_step(iterator, t2)
        except Exception as e:
            agent.fail("the keras-fit hook", e)
        return outputs

    def wrap(trainer: Any, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        timer: ExecutionTimer | None = None
        traced = _traced(fn)
        cell = _closure_cell(fn, "one_step_on_data")
        tf = sys.modules.get("tensorflow")
        no_strategy = getattr(trainer, "_distribute_strategy", None) is None
        spe = getattr(trainer, "steps_per_execution", 1)
        if cell is not None and tf is not None and no_strategy and not traced:
            timer = ExecutionTimer(tf, cell, spe, clock.span_many)
            agent.patches.on_detach("keras one_step_on_data", timer.restore)
            if spe != 1:
                agent.note_steps(
                    clocks.KERAS_FIT,
                    f"steps_per_execution={spe}: each execution's time and input wait, "
                    "divided by its steps",
                )

        def train_function(iterator: Any) -> Any:
            if timer is not None and timer.refused():
                # Keras' own compile() would retrace too; our op must never fail a step
                trainer.make_train_function(force=True)
                return trainer.train_function(iterator)
            if not agent.enabled or type(iterator) is not hooks_tf.owned_cls():
                if agent.enabled:
                    _status(agent, "the batches do not come from a tf.data iterator")
                return fn(iterator)
            if not no_strategy:
                _status(agent, "a tf.distribute strategy is in use")
                return fn(iterator)
            if timer is not None:
                return timed(timer, fn, iterator)
            fetch = hooks_tf.orig_next()
            if traced and spe == 1 and fetch is not None:
                return eager_step(fn, iterator, fetch)
            _status(
                agent,
                f"steps_per_execution={spe}: the train function was compiled before the agent came"
                if traced
                else "this Keras' train function has no one_step_on_data to time",
            )
            return fn(iterator)

        train_function._sofa_top_wrapped = True  # type: ignore[attr-defined]
        return train_function

    def make_train_function(self: Any, force: bool = False) -> Any:
        result = orig_make(self, force)
        fn = getattr(self, "train_function", None)
        if fn is not None and not getattr(fn, "_sofa_top_wrapped", False):
            try:
                agent.patches.set(self, "train_function", wrap(self, fn))
            except Exception as e:
                agent.fail("the keras-fit hook", e)
        return result

    make_train_function.__wrapped__ = orig_make  # type: ignore[attr-defined]
    agent.patches.set(cls, "make_train_function", make_train_function)
    if hooks_tf.owned_cls() is None:
        _State.reason = "tf.data iterator hook (tf-eager) did not apply"
        agent.hook_skipped(clocks.KERAS_FIT, _State.reason)
    else:
        _status(agent, None)


def install_keras_epochs(agent: Agent, module: ModuleType) -> None:
    """At each epoch's end, hand on the timers' pending steps; at its start, restart the
    keras-fit step clock (keras.src.callbacks.callback_list)."""
    cls = getattr(module, "CallbackList", None)
    begin = getattr(cls, "on_epoch_begin", None)
    end = getattr(cls, "on_epoch_end", None)
    if cls is None or begin is None or end is None:
        return  # steps then span epoch ends and wait for the next read; still counted
    clock = agent.clock(clocks.KERAS_FIT)

    def flush() -> None:
        try:
            keras_timer.flush_all()
        except Exception as e:
            agent.fail("the keras-fit hook", e)

    def on_epoch_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        flush()  # (an epoch that ended in an error left its steps pending)
        clock.reset()
        return begin(self, *args, **kwargs)

    def on_epoch_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        flush()
        return end(self, *args, **kwargs)

    on_epoch_begin.__wrapped__ = begin  # type: ignore[attr-defined]
    on_epoch_end.__wrapped__ = end  # type: ignore[attr-defined]
    agent.patches.set(cls, "on_epoch_begin", on_epoch_begin)
    agent.patches.set(cls, "on_epoch_end", on_epoch_end)
