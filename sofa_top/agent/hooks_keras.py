"""Keras ``fit`` hooks (Keras 3, TensorFlow backend; stdlib only at import).

keras-fit
    ``model.fit`` hands the tf.data iterator to a compiled function that calls ``get_next()``
    in the graph, so no Python code ever sees the wait. ``make_train_function`` is wrapped, and
    the train function it makes is measured in one of two ways:

    ``steps_per_execution == 1``: the wrapper fetches the batch eagerly with the (unwrapped)
    ``OwnedIterator.__next__``, timing it, then passes ``(batch,)`` to Keras' own
    ``train_function``, which for a non-iterator argument runs its compiled
    ``one_step_on_data(batch)``. Same compiled step, same data, same order; the wait is timed
    exactly. Cost: none measurable (0.92-0.95x the step time of Keras' in-graph fetch on a
    2-core box, ``tests/agent/bench_overhead.py``).

    ``steps_per_execution = N > 1``: Keras runs N steps in one compiled ``tf.while_loop``, and
    the fetch of batch ``k + 1`` runs *concurrently* with the compute of batch ``k`` (automatic
    control dependencies order ops per resource: the iterator and the variables are
    different). Fetching the N batches eagerly first would serialize that overlap (measured:
    +60% step time on a small model) and time something the workload never does. So the
    compiled loop is left as it is and only its step function is wrapped, in the graph: the
    ``one_step_on_data`` of Keras' closure is replaced, before it is first traced, by one that
    takes ``tf.timestamp()`` when its batch is ready and when its step is done, and adds
    ``max(0, ready_k - done_(k-1))`` -- the time step ``k`` waited for its batch -- to a
    small variable that Python reads once per execution. Per-step numbers are the
    execution's divided by its steps (said in ``step_notes``); there is no CPU reading of the
    wait (it happens inside the graph). Cost: 2 timestamp ops and a variable update per
    step, and one eager assign plus one read per execution: 1.01x the step time of a 1.8 ms
    step, 1.2x of a 0.17 ms one (``benchmarks/keras_spe.py``, busy 2-core machine).

    Other settings (a distribution strategy, batches that do not come from a tf.data
    iterator, a Keras without ``one_step_on_data`` in its closure) are reported as skipped
    rather than guessed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sofa_top.agent import hooks_tf
from sofa_top.agent.core import Agent, HookSkipped


class _State:
    reason: str | None = "not installed"  # why keras-fit does not apply (None: it does)


def _status(agent: Agent, reason: str | None) -> None:
    if reason == _State.reason:
        return
    _State.reason = reason
    if reason is None:
        agent.hook_applied("keras-fit")
    else:
        agent.hook_skipped("keras-fit", reason)


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


class ExecutionTimer:
    """Times the input wait of each compiled multi-step execution inside the graph.

    ``state`` is a float64 variable ``[done_s, wait_s, steps]``: the wall time the last step
    finished, the waits summed since ``start`` and the steps run since ``start``. An execution
    that first traced the function (Python runs ``timed_step`` only while tracing, which is how
    ``traced`` knows) has the tracing inside its first step's wait: its wait is not counted.
    """

    def __init__(self, tf: Any, step_cell: Any) -> None:
        self.state = tf.Variable([0.0, 0.0, 0.0], dtype=tf.float64, trainable=False)
        self.traced = False
        inner = step_cell.cell_contents
        state = self.state
        zero = tf.constant(0.0, tf.float64)
        one = tf.constant(1.0, tf.float64)

        def timed_step(data: Any) -> Any:
            self.traced = True
            tensors = [t for t in tf.nest.flatten(data) if isinstance(t, tf.Tensor)]
            with tf.control_dependencies(tensors):
                ready = tf.timestamp()  # the batch has reached the step
            outputs = inner(data)
            with tf.control_dependencies(
                [t for t in tf.nest.flatten(outputs) if isinstance(t, tf.Tensor)]
            ):
                done = tf.timestamp()
            prev = state.read_value()
            wait = tf.maximum(zero, ready - prev[0])
            state.assign(tf.stack([done, prev[1] + wait, prev[2] + one]))
            return outputs

        timed_step.__wrapped__ = inner  # type: ignore[attr-defined]
        step_cell.cell_contents = timed_step

    def start(self) -> None:
        """Reset before an execution: its first batch is waited for from now."""
        self.traced = False
        self.state.assign([time.time(), 0.0, 0.0])

    def read(self) -> tuple[float, int]:
        """(input wait in seconds, steps) of the execution since ``start``."""
        _done, wait, steps = (float(v) for v in self.state.numpy())
        return (0.0 if self.traced else wait), round(steps)


def install_keras(agent: Agent, module: ModuleType) -> None:
    """Wrap ``TensorFlowTrainer.make_train_function`` (keras.src.backend.tensorflow.trainer)."""
    cls = getattr(module, "TensorFlowTrainer", None)
    orig_make = getattr(cls, "make_train_function", None)
    if cls is None or orig_make is None:
        raise HookSkipped("keras TensorFlowTrainer.make_train_function not found")
    clock = agent.clock("keras-fit")
    clock.resolve_batch_size = hooks_tf.resolve_batch_size
    perf = time.perf_counter

    def one_step(trainer: Any, fn: Callable[[Any], Any], iterator: Any, fetch: Any) -> Any:
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
            if t2 >= hooks_tf.stats_due():
                hooks_tf.maybe_pull_stats(agent, iterator, t2)
            _status(agent, None)
        except Exception as e:
            agent.fail("the keras-fit hook", e)
        return outputs

    def many_steps(timer: ExecutionTimer, fn: Callable[[Any], Any], iterator: Any, spe: int) -> Any:
        t0 = perf()
        try:
            timer.start()
        except Exception as e:
            agent.fail("the keras-fit hook", e)
            return fn(iterator)
        try:
            outputs = fn(iterator)
        except StopIteration:
            clock.reset()
            raise
        t2 = perf()
        try:
            wait, steps = timer.read()
            if steps > 0:
                clock.span_many(iterator, t0, t2, wait, steps)
            agent.note_steps(
                "keras-fit",
                f"steps_per_execution={spe}: each execution's time and input wait, "
                "divided by its steps",
            )
            _status(agent, None)
        except Exception as e:
            agent.fail("the keras-fit hook", e)
        return outputs

    def wrap(trainer: Any, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        timer: ExecutionTimer | None = None
        spe_at_wrap = getattr(trainer, "steps_per_execution", 1)
        if spe_at_wrap != 1:
            cell = _closure_cell(fn, "one_step_on_data")
            tf = sys.modules.get("tensorflow")
            if cell is not None and tf is not None:
                timer = ExecutionTimer(tf, cell)

        def train_function(iterator: Any) -> Any:
            fetch = hooks_tf.orig_next()
            if not agent.enabled or fetch is None or type(iterator) is not hooks_tf.owned_cls():
                if agent.enabled:
                    _status(agent, "the batches do not come from a tf.data iterator")
                return fn(iterator)
            if getattr(trainer, "_distribute_strategy", None) is not None:
                _status(agent, "a tf.distribute strategy is in use")
                return fn(iterator)
            spe = getattr(trainer, "steps_per_execution", 1)
            if spe == 1:
                return one_step(trainer, fn, iterator, fetch)
            if timer is None or spe != spe_at_wrap:
                _status(
                    agent,
                    f"steps_per_execution={spe}: this Keras' train function has no "
                    "one_step_on_data to time",
                )
                return fn(iterator)
            return many_steps(timer, fn, iterator, spe)

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
    if hooks_tf.orig_next() is None:
        _State.reason = "tf.data iterator hook (tf-eager) did not apply"
        agent.hook_skipped("keras-fit", _State.reason)
    else:
        _status(agent, None)


def install_keras_epochs(agent: Agent, module: ModuleType) -> None:
    """Restart the keras-fit step clock at each epoch (keras.src.callbacks.callback_list)."""
    cls = getattr(module, "CallbackList", None)
    orig = getattr(cls, "on_epoch_begin", None)
    if cls is None or orig is None:
        return  # steps then span epoch ends; still correct, only less tidy
    clock = agent.clock("keras-fit")

    def on_epoch_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        clock.reset()
        return orig(self, *args, **kwargs)

    on_epoch_begin.__wrapped__ = orig  # type: ignore[attr-defined]
    agent.patches.set(cls, "on_epoch_begin", on_epoch_begin)
