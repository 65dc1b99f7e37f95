"""The model-call clock: a step per call of the loop's model, for loops no fetch marks (stdlib).

A loop that prepares its input in its own body (decode, resize, tokenise in Python, one
request at a time) has no DataLoader or tf.data iterator to time. What it always has is the
call of its model. The hooks (``hooks_model``) report each *outermost* model call of a thread
(a PyTorch ``nn.Module`` call not nested in another, a Keras model call or
``predict``/``evaluate``/``..._on_batch``, a ``tf.function`` call) to ``ModelLoop.enter`` and
``leave``; with the backward and optimizer spans (``spans``) they are the step's compute. The
step's host time is the loop thread's time between the end of the last compute span (a model
call, a backward, an optimizer step) and the lead model's first call of this step, less the
spans in it (``zero_grad``): it prepares that call's input; it is sent as the step's input
wait, and the stacks say what it was. What the loop does between its compute spans (a loss or
a metric in plain tensor ops, between the forward and the backward) is the step's compute.

Boundaries: a step ends where its compute ends, and the next one's host time begins: at the
return of a call of the *lead* model (the first model called; another one leads once it is
called twice while the lead is not: a criterion or a second network called between the lead's
calls is compute of the same step). In a training loop (an optimizer step or a backward seen)
the lead optimizer's ``step()`` ends the step (``loops.TorchLoop`` calls ``mark``), else the
backward, so a recurrent network called once per character is one step per iteration; calls
inside an optimizer step (LBFGS's closure) are no lead calls, and a call that cannot train
(``no_grad``, ``eval()``: an evaluation pass) ends its own step. So step ``n`` is the host time
before call ``n`` (preparing its input) then its compute, and the first call (which builds,
traces, allocates) only starts the clock.

One clock at a time: a clock that sees input (a fetch, a user's mark) on the loop's thread
since the previous boundary takes the loop (this clock restarts), and once it has marked the
loop twice around this clock's calls keeps it while it marks (a second or three of its steps
since its last mark: a model called several times per fetch makes no steps of its own past
the first fetch); the optimizer and backward
clocks yield to this one when it marks the iteration (``mark``). A call that another clock's step
falls inside (a Keras ``predict`` fetching its own batch) holds that step: a second one shows a
loop inside the call (``predict`` over a data set: those steps stand, this clock restarts);
a single one is the call's own fetch and is dropped (the model-call step covers it).

Bad input: calls from a thread other than the loop's are not steps; calls from several
threads at once (one entering while the loop's thread is inside its call) or in turn, or
inside a DataLoader worker, stop the clock with the reason (``hook_skipped``; the analysis
then leaves out the steps it marked before it knew); calls inside a fetch (a model in a
``Dataset``) are input work.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sofa_top.agent import clocks
from sofa_top.agent.loops import TorchLoop
from sofa_top.agent.spans import EVAL
from sofa_top.agent.step_record import StepRecord

if TYPE_CHECKING:
    from sofa_top.agent.core import Agent

MODEL_SOURCES = (clocks.TORCH_MODEL_CALL, clocks.KERAS_MODEL_CALL, clocks.TF_FUNCTION_CALL)
_SWITCHES_MAX = 6  # caller changes without a long run of one thread: several threads
_LONG_RUN = 4  # calls of one thread in a row that forgive two earlier switches
_HANDOFF = 3  # calls in a row of a new thread: the loop moved there
_MAX_OTHERS = 16  # other models counted between two calls of the lead
_FED_HOLD_S = 1.0  # a feeding clock holds the loop this long (or 3 of its steps, <= 10 s)
_OVERLAPS = 3  # calls of other threads while the loop's thread is inside its own: at once
FIRST_CALL = "a step runs from one model call's end to the next's: the first call starts the clock"
SEVERAL_THREADS = (
    "the model is called from several threads: no one loop's steps to time (mark the "
    "loop's steps with sofa_top.agent.api.mark_step)"
)


def _weighted(model: object) -> bool:
    """Whether ``model`` holds weights (a torch module's parameters, a Keras model's weights):
    a loss or an activation called as a module holds none."""
    try:
        params = getattr(model, "parameters", None)
        if callable(params):
            return next(iter(params()), None) is not None
        return bool(getattr(model, "weights", None))
    except Exception:
        return False


def _ref(obj: object) -> Callable[[], object]:
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def batch_of(args: tuple[Any, ...]) -> int | None:
    """The batch size of a model call: the first dimension of its first argument (>= 2-D)."""
    if not args:
        return None
    shape = getattr(args[0], "shape", None)
    try:
        return int(shape[0]) if shape is not None and len(shape) >= 2 else None
    except (TypeError, ValueError, IndexError):
        return None


LEAD = 1 << 20  # a token's flag (never sent): the call is the lead model's

if TYPE_CHECKING:
    # (span start, flags, span kind) for leave
    Token = tuple[tuple[float, float, float], int, int]


class ModelLoop:
    """The model-call clock of one process (see the module docstring)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.torch: TorchLoop | None = None
        self.off: str | None = None  # why the clock stopped for good
        self.inside = False  # the loop's thread is inside a counted model call
        self._owner = 0
        self._prev_caller = 0
        self._run = 0
        self._switches = 0
        self._lead: Callable[[], object] | None = None
        self._lead_bare = False  # the lead holds no weights (a criterion seen first)
        self._source = ""
        # the other models called since the lead's last call: id -> (weakref, calls)
        self._others: dict[int, tuple[Callable[[], object], int]] = {}
        self._torch_seen = False
        self._overlaps = 0
        self._fed_at = 0
        self._fed_t: float | None = None  # when a feeding clock last marked this loop
        self._fed_gap = 0.0  # its longest time between two marks
        self._called = False  # a lead call since the last boundary
        self._call_bs: int | None = None  # the last lead call's batch size
        self._host: float | None = None  # the step's host time, known at its first lead call
        # the running step: its start, number, and the spans and collectives at its start
        self._running = False
        self._step = 0
        self._last = 0.0
        self._compute_at = 0.0
        self._collective_at = 0.0
        self._held: StepRecord | None = None
        self._passing = False
        # told of each outermost model call (the model, its seconds) while set: the model
        # probe's timing, which torch module hooks would do with a frame more per nested call
        self.call_timer: Callable[[object, float], None] | None = None
        agent.step_gate = self._gate

    # -- the rare path: once per outermost model call ---------------------------------------

    def enter(
        self,
        model: object,
        source: str,
        kind: int,
        flags: int,
        args: tuple[Any, ...],
        t0: float | None = None,
    ) -> Token | None:
        """An outermost model call starts on this thread (at ``t0``, perf_counter: before the
        hook's own work); a token for ``leave``, or None when the call is not the loop's
        (another thread, inside a fetch, the clock stopped)."""
        if self.off is not None or self.agent.tls.fetching:
            return None
        ident = threading.get_ident()
        if not self._caller(ident):
            return None
        if source == clocks.TORCH_MODEL_CALL:
            self._torch_seen = True
        elif source == clocks.TF_FUNCTION_CALL and self._torch_seen:
            return None  # TensorFlow preprocessing for a torch model: input work
        torch = self.torch
        lead = not (torch is not None and torch.in_step) and self._leads(model, source)
        if lead:
            if self._host is None:
                self._host = self._host_before(time.perf_counter() if t0 is None else t0)
            self._called = True
            self._call_bs = batch_of(args)
        self.inside = True
        self._held = None
        self._passing = False
        spans = self.agent.spans
        spans.sticky = flags
        return (spans.start(self.agent.collective_s), flags | (LEAD if lead else 0), kind)

    def leave(self, token: Token) -> None:
        """The call whose ``enter`` returned ``token`` returned (or raised)."""
        start, flags, kind = token
        self.inside = False
        spans = self.agent.spans
        spans.sticky = 0
        spans.end(kind, start, self.agent.collective_s, flags & ~LEAD)
        self._held = None  # the call's own fetch: this clock's step covers it
        if self._passing:
            self._passing = False
            self._running = False  # a loop inside the call marked its steps: restart
            self._called = False
            self._host = None
            return
        torch = self.torch
        training = torch is not None and (torch.lead_steps or torch.backwards)
        # an inference loop's call ends its step; so does one that cannot train (an
        # evaluation pass of a training loop: no optimizer step will end it)
        if flags & LEAD and (not training or flags & EVAL):
            self._boundary(time.perf_counter(), threading.get_ident())

    def mark(self, t: float) -> bool:
        """The lead optimizer stepped (or, with none, a backward ended) at ``t``: the end of a
        training iteration. True when this clock marks it (the lead model ran in it)."""
        if not self._called or self.off is not None:
            return False
        ident = threading.get_ident()
        if ident != self._owner:
            return False
        return self._boundary(t, ident)

    def _caller(self, ident: int) -> bool:
        """Whether a call on thread ``ident`` is the loop's (and which thread the loop is on)."""
        if ident == self._prev_caller:
            self._run += 1
            if self._run == _LONG_RUN:
                self._switches = max(0, self._switches - 2)
        else:
            self._prev_caller = ident
            self._run = 1
            self._switches += 1
        if self._owner == 0:
            self._owner = ident
            worker = sys.modules.get("torch.utils.data._utils.worker")
            if worker is not None and getattr(worker, "_worker_info", None) is not None:
                self.stop(
                    "the model is called inside a DataLoader worker: its calls are the "
                    "worker's input work, not the training or inference loop's steps"
                )
                return False
            return True
        if ident == self._owner:
            return True
        if self.inside:
            self._overlaps += 1  # the loop's thread is inside its call: two at once
        if self._switches >= _SWITCHES_MAX or self._overlaps >= _OVERLAPS:
            self.stop(SEVERAL_THREADS)
            return False
        if self._run >= _HANDOFF:  # the loop moved to this thread (a warm-up was elsewhere)
            self._owner = ident
            self._running = False
            self._lead = None
            return True
        return False

    def stop(self, reason: str) -> None:
        """Stop this clock for good and say why."""
        self.off = reason
        self._running = False
        self.inside = False
        for source in MODEL_SOURCES:
            if source in self.agent._applied:
                self.agent.hook_skipped(source, reason)

    def _leads(self, model: object, source: str) -> bool:
        lead = self._lead() if self._lead is not None else None
        others = self._others
        if lead is model:
            others.clear()
            return True
        # a lead with no weights (a loss: the first call seen when attached inside the model's
        # forward) gives way to the first model with weights: else its host time is the loss's
        if lead is not None and not (self._lead_bare and _weighted(model)):
            ref, calls = others.get(id(model), (None, 0))
            if ref is None or ref() is not model:
                if len(others) >= _MAX_OTHERS:
                    others.clear()
                others[id(model)] = (_ref(model), 1)
                return False
            if calls < 1:
                others[id(model)] = (ref, calls + 1)
                return False
        # the first model, or another one called twice while the lead was not (a criterion
        # called between them keeps its own count): it leads
        self._lead = _ref(model)
        self._lead_bare = not _weighted(model)
        others.clear()
        if source != self._source:
            self._source = source
            self._running = False
        return True

    def _host_before(self, t0: float) -> float:
        """The host time before a call at ``t0``: since the end of the last compute span (or
        the step's start), less the spans and collectives in between (``zero_grad``)."""
        spans, agent = self.agent.spans, self.agent
        end, total, coll = spans.last
        if end < self._last:  # no compute since the step began
            end, total, coll = self._last, self._compute_at, self._collective_at
        return max(0.0, t0 - end - (spans.total - total) - (agent.collective_s - coll))

    def _boundary(self, t: float, ident: int) -> bool:
        """The step's compute ended at ``t``; False when a clock that sees input marks the loop."""
        agent = self.agent
        self._called = False
        host, self._host = self._host, None
        if agent.fed != self._fed_at:
            self._fed_at = agent.fed
            if agent.fed_thread == ident:
                if self._fed_t is not None:
                    self._fed_gap = max(self._fed_gap, t - self._fed_t)
                self._fed_t = t
                self._running = False  # a clock that sees input marks this loop
                return False
        if self._fed_t is not None and self._fed_gap > 0:
            # the model called several times a fetch (a model per batch item, a GAN's two
            # networks), seen between two fetches: the feeding clock keeps the loop until it
            # stops feeding (a fetch before the loop, all batches fetched up front: no hold)
            if t - self._fed_t <= max(_FED_HOLD_S, min(3.0 * self._fed_gap, 10.0)):
                self._running = False
                return False
            self._fed_t, self._fed_gap = None, 0.0
        spans = agent.spans
        coll = agent.collective_s
        if self._running:
            if host is None:  # no lead call seen: all of the step but its spans
                host = t - self._last - (spans.total - self._compute_at)
                host = max(0.0, host - (coll - self._collective_at))
            agent.push(StepRecord(self._source, self._step, self._last, t, host, self._call_bs))
            self._step += 1
        else:
            agent.note_steps(self._source, FIRST_CALL)
        self._running = True
        self._last = t
        # this bookkeeping is the agent's, not the loop's host time: counted with the spans
        # (in no kind of the split), it stays out of the next step's host time
        spans.total += max(0.0, time.perf_counter() - t)
        self._compute_at = spans.total
        self._collective_at = coll
        return True

    def _gate(self, record: StepRecord) -> bool:
        """``Agent.step_gate``: hold a step another clock marks inside a counted call; a step
        another clock marks outside one (Keras ``fit`` between two ``predict`` loops, a
        DataLoader's) ends this clock's run: no step of its spans the other's time."""
        if record.source == self._source or self._passing:
            return False
        if threading.get_ident() != self._owner:
            return False
        if not self.inside:
            self._running = False
            return False
        held = self._held
        if held is None:
            self._held = record
            return True
        self._held = None
        self._passing = True  # a second one: the call loops over its own input
        self.agent.deliver(held)
        return False


class _State:
    agent: Agent | None = None
    model: ModelLoop | None = None
    torch: TorchLoop | None = None


def loops(agent: Agent) -> tuple[ModelLoop, TorchLoop]:
    """The model-call clock and the torch loop of ``agent`` (made on first use, together)."""
    model, torch = _State.model, _State.torch
    if _State.agent is not agent or model is None or torch is None:
        model = ModelLoop(agent)
        torch = model.torch = TorchLoop(agent, model)
        _State.agent, _State.model, _State.torch = agent, model, torch
    return model, torch
