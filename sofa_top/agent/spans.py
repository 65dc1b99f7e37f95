"""What each step's compute is: forward, backward and optimizer spans, and the step's phase.

The model-call hook (``hooks_model``), the backward and optimizer hooks (``hooks_torch``,
``hooks_model`` for TensorFlow) time their outermost calls into ``ComputeSpans``; ``Agent.push``
takes, with each step record, what was spent since the previous record. Spans are exclusive:
a forward inside an optimizer step (LBFGS's closure) counts as forward, and the optimizer's
span is its own time less that (and less the collectives it waited for, which are counted
apart). So ``step time - spans - collectives`` is the step's host time (stdlib only).

Phase evidence rides along as bit flags: ``TRAIN`` (a backward, an optimizer step, Keras
``train_on_batch``, a Keras model called with ``training=True``), ``EVAL`` (a model called
under ``no_grad``/``inference_mode``/``eval()``, Keras ``predict``/``evaluate``), ``SEEN`` (some
span was timed in the step) and ``OPAQUE`` (a span that holds forward, backward and update
together: a ``tf.function``, Keras ``train_on_batch``: its compute is not split); ``TORCH`` (a
torch model call) and ``AUTOGRAD`` (one ran with autograd on: ``torch.inference_mode()`` would
spare its bookkeeping).
"""

from __future__ import annotations

import threading
import time

from sofa_top.agent.protocol import PHASE_AUTOGRAD, PHASE_EVAL, PHASE_TORCH, PHASE_TRAIN

TRAIN, EVAL, SEEN, OPAQUE = PHASE_TRAIN, PHASE_EVAL, 4, 8
AUTOGRAD, TORCH = PHASE_AUTOGRAD, PHASE_TORCH
FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2


class CallDepth(threading.local):
    """Per thread: how deep inside an outermost model call (0: outside), and inside a fetch."""

    depth = 0
    fetching = 0


class ComputeSpans:
    """Cumulative exclusive span time per kind; the hooks add, ``take`` hands out deltas."""

    __slots__ = ("_at", "flags", "kinds", "last", "sticky", "total")

    def __init__(self) -> None:
        self.total = 0.0  # all spans, exclusive: inner spans are taken out of outer ones
        self.kinds = [0.0, 0.0, 0.0, 0.0]  # forward, backward, optimizer, opaque
        self.flags = 0  # phase evidence since the last step record
        # evidence of the model call in progress: every step taken inside it carries it (the
        # steps another clock marks inside a Keras predict are inference steps)
        self.sticky = 0
        self._at = [0.0, 0.0, 0.0]
        # when the last compute span ended, and the spans and collectives then: what follows
        # it up to the next model call is host time (``model_loop``)
        self.last = (0.0, 0.0, 0.0)

    def start(self, collective_s: float) -> tuple[float, float, float]:
        """A span begins: (perf_counter, spans so far, collectives so far)."""
        return (time.perf_counter(), self.total, collective_s)

    def end(
        self,
        kind: int,
        start: tuple[float, float, float],
        collective_s: float,
        flags: int = 0,
        ends_compute: bool = True,
    ) -> float:
        """A span ends: its own time (less inner spans and collectives) is added to ``kind``
        (``FORWARD``..``OPTIMIZER``, or 3: opaque); returns that time. ``ends_compute``:
        False for work that prepares the next step rather than ending one (``zero_grad``)."""
        t0, inner0, coll0 = start
        now = time.perf_counter()
        own = max(0.0, now - t0 - (self.total - inner0) - (collective_s - coll0))
        self.total += own
        self.kinds[kind] += own
        self.flags |= flags | SEEN | (OPAQUE if kind == 3 else 0)
        if ends_compute:
            self.last = (now, self.total, collective_s)
        return own

    def take(self) -> tuple[float, float, float, int]:
        """(forward, backward, optimizer, flags) since the last call; -1.0 where not measured
        (no span in the step, or an opaque one)."""
        flags = self.flags | self.sticky
        self.flags = 0
        kinds, at = self.kinds, self._at
        f, b, o = kinds[0] - at[0], kinds[1] - at[1], kinds[2] - at[2]
        at[0], at[1], at[2] = kinds[0], kinds[1], kinds[2]
        if not flags & SEEN or flags & OPAQUE:
            return -1.0, -1.0, -1.0, flags
        return f, b, o, flags
