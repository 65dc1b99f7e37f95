"""The in-graph step timer of Keras ``fit`` (stdlib only at import; see ``hooks_keras``).

Keras' compiled train function pulls each batch with the iterator's ``get_next()`` inside the
graph: no Python code sees the wait. The timer replaces the ``one_step_on_data`` of Keras'
closure, before it is first traced, by one that takes a wall-clock timestamp when its batch
is ready and when its step is done, and writes both into a small ring (a variable the graph
alone writes). Python reads the ring only now and then (a read is an eager op: ~50-100 us,
as much as a small step's whole compute) and gives each execution the steps whose end falls
inside it, with their input wait: step ``k`` waited from the previous step's end, or from the
execution's start for its first step (Keras' Python between executions, callbacks and logs, is
not input wait), until its batch was ready.
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

FLUSH_S = 0.25  # pending executions are handed on at least this often (while fit runs)
MIN_RING = 128  # steps the ring holds (at least twice steps_per_execution)
_EPS = 1e-6  # timestamps are float seconds: a hair of rounding at the windows' edges

if TYPE_CHECKING:  # aliases only for the checker: the agent also runs on Python 3.8
    # (iterator, execution start perf, end perf, start wall, end wall, traced)
    Pending = tuple[Any, float, float, float, float, bool]
    # an execution's steps handed on: iterator, start perf, end perf, input wait, steps
    Sink = Callable[[Any, float, float, float, int], None]

_LIVE: weakref.WeakSet[ExecutionTimer] = weakref.WeakSet()


def flush_all() -> None:
    """Hand on every timer's pending executions (at an epoch's edge, before its clock resets)."""
    for timer in list(_LIVE):
        timer.flush()


class ExecutionTimer:
    """Times the input wait of Keras' compiled executions inside the graph (see the module).

    ``ring`` is a float64 ``[size, 2]`` variable of ``(ready, done)`` wall times per step and
    ``count`` the steps written so far (step ``n`` is row ``n % size``). An execution that
    first traced the function (Python runs ``timed_step`` in a graph only while tracing, which
    is how ``traced`` knows) has the tracing inside its first step's wait: its wait is not
    counted. The clock op is ``tf.timestamp``, except in a trace made while op determinism is
    on (TensorFlow refuses to run ``tf.timestamp`` then): there a ``tf.py_function`` reads
    ``time.time`` (slower: it takes the GIL).
    """

    def __init__(self, tf: Any, step_cell: Any, steps_per_execution: int, sink: Sink) -> None:
        self.size = max(MIN_RING, 2 * steps_per_execution)
        with tf.device("/CPU:0"):  # beside the timestamps: a GPU step copies nothing for them
            self.ring = tf.Variable(tf.zeros((self.size, 2), tf.float64), trainable=False)
            self.count = tf.Variable(tf.constant(0, tf.int64), trainable=False)
        self.traced = False
        # a trace holds tf.timestamp, which TensorFlow refuses to run once op determinism is on
        self.stamped = False
        config = sys.modules.get("tensorflow.python.framework.config")
        self.determinism: Callable[[], bool] = getattr(
            config, "is_op_determinism_enabled", lambda: False
        )
        self._spe = steps_per_execution
        self._sink = sink
        self._read = 0  # steps read so far
        self._prev_done = 0.0  # the end of the last step read
        self._pending: list[Pending] = []
        self._flushed = time.perf_counter()
        inner = step_cell.cell_contents
        ring, count, size = self.ring, self.count, self.size
        eager = tf.executing_eagerly

        def py_clock() -> Any:
            return tf.py_function(time.time, [], tf.float64)

        def timed_step(data: Any) -> Any:
            if not eager():  # run_eagerly=True runs this every step: that is no tracing
                self.traced = True
            if self.determinism():
                clock = py_clock
            else:
                clock = tf.timestamp
                self.stamped = True
            tensors = [t for t in tf.nest.flatten(data) if isinstance(t, tf.Tensor)]
            with tf.control_dependencies(tensors):
                ready = clock()  # the batch has reached the step
            # the step starts after that stamp: else the executor may run the stamp late, once
            # the step is under way, and count some of its compute as waiting
            with tf.control_dependencies([ready]):
                data = tf.nest.map_structure(
                    lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, data
                )
            outputs = inner(data)
            with tf.control_dependencies(
                [t for t in tf.nest.flatten(outputs) if isinstance(t, tf.Tensor)]
            ):
                done = clock()
            n = count.read_value()
            ring.scatter_nd_update([[n % size]], tf.reshape(tf.stack([ready, done]), (1, 2)))
            count.assign_add(1)
            return outputs

        timed_step.__wrapped__ = inner  # type: ignore[attr-defined]
        step_cell.cell_contents = timed_step
        self._cell, self._inner, self._timed = step_cell, inner, timed_step
        _LIVE.add(self)

    def restore(self) -> None:
        """Put Keras' own step function back in its closure (a trace made since keeps the
        timer's ops: they only write the timer's variables)."""
        if self._cell.cell_contents is self._timed:
            self._cell.cell_contents = self._inner
        _LIVE.discard(self)

    def refused(self) -> bool:
        """Whether running the traced function would now fail (op determinism came on after
        it was traced with tf.timestamp): it must be traced again."""
        return self.stamped and self.determinism()

    def begin(self) -> float:
        """Before an execution: returns its start, wall time."""
        self.traced = False
        return time.time()

    def end(self, it: Any, t0: float, t2: float, started: float) -> None:
        """After an execution (``t0``..``t2``, perf_counter) that returned normally; hands the
        pending ones on when the ring could fill up or ``FLUSH_S`` passed."""
        self._pending.append((it, t0, t2, started, time.time(), self.traced))
        if (len(self._pending) + 1) * self._spe > self.size or t2 - self._flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Read the ring once and hand each pending execution's steps to the sink."""
        pending, self._pending = self._pending, []
        self._flushed = time.perf_counter()
        if not pending:
            return
        count = int(self.count.numpy())
        rows = self.ring.numpy()
        first = max(self._read, count - self.size)  # older rows were written over
        steps = [
            (float(rows[n % self.size][0]), float(rows[n % self.size][1]))
            for n in range(first, count)
        ]
        prev_done = self._prev_done if first == self._read else 0.0
        self._read = count
        if steps:
            self._prev_done = steps[-1][1]
        i = 0
        for it, t0, t2, started, returned, traced in pending:
            while i < len(steps) and steps[i][1] < started - _EPS:
                prev_done = steps[i][1]  # a step outside every timed execution
                i += 1
            wait, n = 0.0, 0
            while i < len(steps) and steps[i][1] <= returned + _EPS:
                ready, done = steps[i]
                wait += max(0.0, ready - max(prev_done, started))
                prev_done = done
                n += 1
                i += 1
            if n:
                self._sink(it, t0, t2, 0.0 if traced else wait, n)
