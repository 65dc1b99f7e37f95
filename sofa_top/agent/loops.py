"""Which clock marks a PyTorch loop's steps, decided by what the loop does (stdlib only).

A step is one iteration of the training loop. Three hooks can see iterations, best first:
DataLoader fetches (they also time the input wait), optimizer steps, and backward passes. Each
marks the steps only while the better ones do not:

* optimizer steps count while no DataLoader fetch (on the same thread) happened since the
  lead optimizer's previous step. A loop fed by a DataLoader fetches before every step, so
  its optimizer stays quiet; a DataLoader iterated once up front (all batches pulled into a
  list, or ``next(iter(loader))`` of the whole set) stops fetching, and the optimizer's clock
  takes over from its second step on.
* several optimizers (one per layer, a GAN's two): the first one to step leads and marks the
  iterations; another one takes the lead when it steps twice while the lead did not (layers
  trained one after the other, forward-forward style).
* ``step(closure)`` (LBFGS) is one step however often its closure runs forward and backward;
  its steps start at ``step()`` (the closure does the iteration's work inside it).
* backward passes count while neither a fetch nor an optimizer step happened since the
  previous backward, and never inside an optimizer step (a closure's backward): a loop that
  updates its weights by hand and feeds itself.

Above the optimizer and backward clocks sits the model-call clock (``model_loop``): when the
lead model ran outside any optimizer step since the last iteration, the iteration's end (the
lead optimizer's step, else the backward) is its boundary and these two stay quiet; it sees
the host time between the model calls, which they cannot.

Each switch costs one step: a clock that was quiet restarts (its first boundary only starts
it), so no step spans the time another clock was marking.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sofa_top.agent import clocks

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent


class _ModelClock(Protocol):
    """The model-call clock as this module uses it (``model_loop.ModelLoop``)."""

    def mark(self, t: float) -> bool: ...


def _ref(obj: object) -> Callable[[], object]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class TorchLoop:
    """The state the torch hooks share to decide which clock marks the steps."""

    def __init__(self, agent: Agent, model: _ModelClock | None = None) -> None:
        self._opt = agent.clock(clocks.TORCH_OPTIMIZER)
        self._bw = agent.clock(clocks.TORCH_BACKWARD)
        self._opt.feeds = self._bw.feeds = False  # they see compute only, never input
        self.model = model
        self.lead_steps = 0  # steps of the lead optimizer (the model-call clock reads these)
        self.backwards = 0  # outermost backward passes outside optimizer steps
        self._ident = threading.get_ident
        self.fetches = 0  # DataLoader fetches so far
        self._fetch_thread = 0
        self._lead: Callable[[], object] | None = None
        self._other: Callable[[], object] | None = None  # a non-lead that stepped since the lead
        self._steps = 0  # step() calls of every optimizer
        self._fetches_at_lead = 0
        self._bw_marks = (0, 0)  # (fetches, optimizer steps) at the previous backward
        self._in_step = False
        self._step_start = 0.0
        self._closure = False

    def fetched(self) -> None:
        """A DataLoader returned a batch (on the hot path: two attribute writes)."""
        self.fetches += 1
        self._fetch_thread = self._ident()

    def _fed(self, since: int) -> bool:
        """Whether a DataLoader fetched on this thread since ``since`` fetches."""
        return self.fetches != since and self._fetch_thread == self._ident()

    @property
    def in_step(self) -> bool:
        """Inside an optimizer's ``step()`` (a closure's forward starts no step)."""
        return self._in_step

    def _model_marks(self, t: float) -> bool:
        """Whether the model-call clock marks the iteration that ended at ``t``."""
        return self.model is not None and self.model.mark(t)

    def optimizer_started(self, t: float, closure: bool) -> None:
        """An optimizer's ``step()`` began (``closure``: it was given one)."""
        self._in_step = True
        self._step_start = t
        self._closure = closure

    def optimizer_stepped(self, optimizer: object, t: float) -> None:
        """An optimizer's ``step()`` returned at ``t``."""
        self._in_step = False
        self._steps += 1
        lead = self._lead() if self._lead is not None else None
        if lead is not None and lead is not optimizer:
            other = self._other() if self._other is not None else None
            if other is not optimizer:
                self._other = _ref(optimizer)  # one step of another optimizer: same iteration
                return
            lead = None  # it stepped twice while the lead did not: it leads now
        if lead is None:
            self._lead = _ref(optimizer)
        self._other = None
        self.lead_steps += 1
        if self._fed(self._fetches_at_lead):
            self._fetches_at_lead = self.fetches
            self._opt.reset()  # the DataLoader's clock marks these steps
            return
        self._fetches_at_lead = self.fetches
        if self._model_marks(t):
            self._opt.reset()  # the model-call clock marks these steps
            return
        if self._closure and not self._opt.running:
            self._opt.tick(self._step_start)  # the closure's work is inside step()
        self._opt.tick(t)

    def backward_done(self, t: float) -> None:
        """An outermost backward pass returned at ``t``."""
        if self._in_step:
            return  # inside step(closure): the optimizer's clock counts it
        self.backwards += 1
        fetches, steps = self._bw_marks
        self._bw_marks = (self.fetches, self._steps)
        if self._steps != steps or self._fed(fetches):
            self._bw.reset()  # an optimizer or a DataLoader marks these steps
            return
        if self._steps == 0 and self._model_marks(t):
            self._bw.reset()  # no optimizer: the model-call clock ends its steps here
            return
        self._bw.tick(t)
