"""Agent core (stdlib only): the bounded queue, step clocks, lazy import hooks, the drain thread.

Cost model: the workload's thread only ever does ``time.perf_counter()`` (vDSO, no syscall), two
``time.process_time()`` calls around each input fetch (a syscall: ~2 us with 150 threads) and a
``deque.append`` per step. A daemon thread wakes every ``flush_interval_s`` and turns the queued
records into length-prefixed JSON frames. When the queue is full, records are dropped and counted.
If sofa-top is unreachable at start the agent stays off; if it dies later the agent switches
itself off and every hook falls through to the original function.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from sofa_top.agent import output, protocol
from sofa_top.agent.patches import Patches
from sofa_top.agent.rankenv import rank_from_env
from sofa_top.agent.sched import add_waits, thread_sched, wait_times
from sofa_top.agent.settings import (
    HOOK_NAMES,
    AgentSettings,
)
from sofa_top.agent.spans import CallDepth, ComputeSpans
from sofa_top.agent.step_frames import steps_frame
from sofa_top.agent.step_record import StepRecord
from sofa_top.agent.transport import Connection

_STEPS_PER_FRAME = 1024  # ~100 bytes each: frames far below MAX_FRAME, sent one by one
# At exit, smaller frames: the one in flight when the steps' share of the exit budget ends is
# still sent whole (a cut frame breaks the stream), and must leave the bye its time.
_EXIT_STEPS_PER_FRAME = 128
_logged = False


def log_once(message: str) -> None:
    """Write one line to stderr, at most once per process, whatever happens."""
    global _logged
    if _logged:
        return
    _logged = True
    try:
        sys.stderr.write(f"sofa-top agent: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


class _Finder(Protocol):
    """The post-import hooks as the agent sees them (``post_import.PostImportHooks``)."""

    def uninstall(self) -> None: ...


class HookSkipped(Exception):
    """Raised by an installer when its hook cannot apply; the message is the reason."""


if TYPE_CHECKING:  # aliases only for the checker: the agent also runs on Python 3.8
    from sofa_top.agent.step_record import Wait

    Installer = Callable[["Agent", ModuleType], None]


def timed_next(
    agent: Agent,
    hook: str,
    orig: Callable[[Any], Any],
    clock: StepClock,
    after_fetch: Callable[[Any, bool, float], None] | None = None,
) -> Callable[[Any], Any]:
    """A ``__next__`` that times each fetch of ``orig`` into ``clock``.

    ``after_fetch(iterator, is_new_iterator, t1)`` runs after a successful fetch. Any failure of
    the bookkeeping is reported once through ``agent.fail`` and never reaches the workload;
    ``StopIteration`` and the iterator's own errors pass through untouched.
    """
    perf = time.perf_counter
    cpu = time.process_time
    where = f"the {hook} hook"

    tls = agent.tls

    def __next__(self: Any) -> Any:
        if not agent.enabled:
            return orig(self)
        # the wall clock outside the CPU clock: that preemptible syscall's time is the fetch's
        t0 = perf()
        c0 = cpu()
        s0 = thread_sched()
        tls.fetching += 1  # a model called inside the fetch (a Dataset's) is input work
        try:
            value = orig(self)
        except StopIteration:
            s1 = thread_sched()
            c1 = cpu()
            t1 = perf()
            try:
                clock.exhausted(self, t0, t1, wait_times(c1 - c0, s0, s1))
            except Exception as e:
                agent.fail(where, e)
            raise
        finally:
            tls.fetching -= 1
        s1 = thread_sched()
        c1 = cpu()
        t1 = perf()
        try:
            new = clock.fetched(self, t0, t1, wait_times(c1 - c0, s0, s1))
            if after_fetch is not None:
                after_fetch(self, new, t1)
        except Exception as e:
            agent.fail(where, e)
        return value

    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    __next__.__qualname__ = getattr(orig, "__qualname__", "__next__")
    return __next__


class StepClock:
    """Step boundaries from consecutive fetches of one iterator.

    Step ``n`` runs from the return of fetch ``n`` to the return of fetch ``n + 1``: the compute
    on batch ``n``, then the wait for batch ``n + 1`` (its ``input_wait_s``). Another iterator
    restarts the clock. An iterator fetched from again after its end (``persistent_workers``)
    carries that first fetch into its next step (the wait is the loop's; a step from the
    epoch's end would span what the loop did between epochs). ``cpu``: the process's CPU time
    during the wait (input work vs I/O; < 0: unknown), or ``wait_times``' tuple: that, then the
    loop thread's own on-CPU and queued seconds.
    """

    __slots__ = (
        "_agent",
        "_bs",
        "_carry",
        "_cur",
        "_ended",
        "_last",
        "feeds",
        "resolve_batch_size",
        "source",
        "step",
    )

    def __init__(self, agent: Agent, source: str) -> None:
        self._agent = agent
        self.source = source
        self.step = 0
        # its boundaries mark the loop over the model-call clock (a fetch, a user's mark);
        # the clocks that only see compute (optimizer, backward, model calls) say False
        self.feeds = True
        self._cur: Callable[[], object] | None = None
        self._ended: Callable[[], object] | None = None  # the iterator that ran out last
        self._carry: tuple[float, Wait] | None = None  # a resumed iterator's first (wait, cpu)
        self._last = 0.0
        self._bs: int | None = None
        # called once per new iterator, never per step
        self.resolve_batch_size: Callable[[object], int | None] | None = None

    @property
    def running(self) -> bool:
        """Whether a boundary was seen since the last reset (the next one ends a step)."""
        return self._cur is not None

    def _switch(self, it: object) -> None:
        self._cur = _ref(it)
        resolve = self.resolve_batch_size
        self._bs = None if resolve is None else resolve(it)

    def fetched(self, it: object, t0: float, t1: float, cpu: Wait = -1.0) -> bool:
        """Record one fetch of ``it`` that ran from ``t0`` to ``t1`` (perf_counter).

        Returns True when ``it`` is a new iterator (no step was recorded)."""
        if self.feeds:
            self._agent.fed_now()
        cur = self._cur
        if cur is None or cur() is not it:
            ended = self._ended
            resumed = cur is None and ended is not None and ended() is it
            self._switch(it)
            self._last = t0 if resumed else t1
            self._carry = (t1 - t0, cpu) if resumed else None
            return not resumed
        wait = t1 - t0
        carry = self._carry
        if carry is not None:
            self._carry = None
            wait += carry[0]
            cpu = add_waits(cpu, carry[1])
        self._agent.push(StepRecord(self.source, self.step, self._last, t1, wait, self._bs, cpu))
        self.step += 1
        self._last = t1
        return False

    def exhausted(self, it: object, t0: float, t1: float, cpu: Wait = -1.0) -> None:
        """A fetch of ``it`` found no more data: close the last step, forget the iterator."""
        if self.feeds:
            self._agent.fed_now()
        cur = self._cur
        if cur is not None and cur() is it:
            if self._carry is None:  # (a resumed iterator that ended at once: no step)
                push = StepRecord(self.source, self.step, self._last, t1, t1 - t0, self._bs, cpu)
                self._agent.push(push)
                self.step += 1
            self._ended = cur
        self._carry = None
        self._cur = None

    def span(self, it: object, t0: float, t1: float, t2: float, cpu: Wait = -1.0) -> None:
        """A step that fetched from ``it`` (``t0``..``t1``) then computed until ``t2``.

        It starts where the previous step of the same iterator ended, else at its fetch."""
        if self.feeds:
            self._agent.fed_now()
        cur = self._cur
        if cur is None or cur() is not it:
            self._switch(it)
            start = t0
        else:
            start = self._last
        self._agent.push(StepRecord(self.source, self.step, start, t2, t1 - t0, self._bs, cpu))
        self.step += 1
        self._last = t2

    def span_many(self, it: object, t0: float, t2: float, wait: float, n: int) -> None:
        """``n`` steps that ran in one call from ``t0`` to ``t2`` (their fetches inside it),
        waiting ``wait`` seconds for input in all: each gets an equal share of both."""
        if self.feeds:
            self._agent.fed_now()
        cur = self._cur
        if cur is None or cur() is not it:
            self._switch(it)
            start = t0
        else:
            start = self._last
        each = (t2 - start) / n
        w = wait / n
        push = self._agent.push
        for i in range(n):
            end = t2 if i == n - 1 else start + (i + 1) * each
            push(StepRecord(self.source, self.step, start + i * each, end, w, self._bs, -1.0))
            self.step += 1
        self._last = t2

    def tick(self, t: float) -> None:
        """A step boundary with no iterator (e.g. after each optimizer step); no input wait."""
        if self.feeds:
            self._agent.fed_now()
        if self._cur is not None:
            self._agent.push(StepRecord(self.source, self.step, self._last, t, 0.0, self._bs, 0.0))
            self.step += 1
        self._cur = _ALWAYS
        self._last = t

    def reset(self) -> None:
        """Forget the last boundary (the next fetch or tick starts a new run of steps)."""
        self._cur = None
        self._ended = None
        self._carry = None


def _uncaught_error() -> str:
    """The exception that is ending the interpreter, if one is (``sys.last_value`` is set by
    the traceback print, before ``atexit`` runs); "" for a normal exit or ``sys.exit``."""
    exc = getattr(sys, "last_value", None)
    if exc is None:
        return ""
    try:
        return f"{type(exc).__name__}: {exc}"[:300]
    except Exception:
        return type(exc).__name__


def _always() -> object:
    return None


_ALWAYS: Callable[[], object] = _always


def _ref(it: object) -> Callable[[], object]:
    try:
        return weakref.ref(it)
    except TypeError:
        # no weakref support: compare by identity of a (kept) reference instead
        return lambda: it


class Agent:
    """State shared by the hooks and the drain thread of one process."""

    def __init__(
        self,
        settings: AgentSettings,
        conn: Connection | None,
        mode: str = "launch",
        token: str = "",
    ) -> None:
        self.settings = settings
        self.enabled = conn is not None
        self.mode = mode  # "launch" (sitecustomize) or "attach" (injected into a running job)
        self.token = token  # attach mode: proves to sofa-top that this is the agent it injected
        self.patches = Patches()
        self.finder: _Finder | None = None  # attach mode: the import hooks, removed at detach
        self.detached = False
        self.pid = os.getpid()
        self.dropped = 0
        self._conn = conn
        self._qmax = settings.queue_max
        self._steps: collections.deque[StepRecord] = collections.deque()
        self._control: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._exit_deadline: float | None = None  # perf_counter; set when the interpreter exits
        self._thread: threading.Thread | None = None
        self._send_lock = threading.Lock()
        # wall time = perf_counter + offset; perf_counter is what the hot path can afford
        self._offset = time.time() - time.perf_counter()
        self._applied: list[str] = []
        self._skipped: dict[str, str] = {
            h: "not imported by the workload"
            for h in HOOK_NAMES
            if h not in settings.disabled_hooks
        }
        for h in settings.disabled_hooks:
            if h in HOOK_NAMES:
                self._skipped[h] = "disabled in settings"
        self._info_dirty = True
        self._last_dropped = 0
        self._clocks: dict[str, StepClock] = {}
        # seconds blocked in collectives so far (hooks_dist adds to it) and what was handed
        # to steps already; measured: a hook has timed at least one collective
        self.collective_s = 0.0
        self.collective_measured = False
        self._collective_pushed = 0.0
        # hooks_cuda's step observer: it sees every step record first (to record a CUDA event
        # at the boundary) and queues it once its GPU time is known; None: no CUDA hook
        self.step_observer: Callable[[StepRecord], None] | None = None
        # called by the drain thread before each flush (hooks_cuda releases stale records)
        self.before_flush: Callable[[bool], None] | None = None
        self._step_notes: dict[str, str] = {}  # source -> how its steps are measured
        # the model-call clock's view of the loop (hooks_model, spans): which thread is inside
        # a model call or a fetch, the compute spans of each step, and how many boundaries
        # the clocks that see input (fetches, user marks) made, and on which thread
        self.tls = CallDepth()
        self.spans = ComputeSpans()
        self.fed = 0
        self.fed_thread = 0
        # the model-call loop's gate: it holds a step another clock marks inside a model call
        # (a Keras predict's own fetch) until it knows whether the call loops over many
        self.step_gate: Callable[[StepRecord], bool] | None = None

    # -- hot path -------------------------------------------------------------------------

    def push(self, record: StepRecord) -> None:
        """Hand one step record on (to the CUDA observer, else the queue); never blocks.

        The record gets the time blocked in collectives since the last step (where measured)
        and the step's compute spans and phase flags (``spans.ComputeSpans.take``)."""
        if self.collective_measured:
            # the collectives since the last step belong to this one (never more than its time)
            total = self.collective_s
            spent = min(total - self._collective_pushed, record.end - record.start)
            self._collective_pushed = total
            record.collective = max(0.0, spent)
        record.set_spans(self.spans.take())
        gate = self.step_gate
        if gate is not None and gate(record):
            return
        self.deliver(record)

    def deliver(self, record: StepRecord) -> None:
        """A finished record to the CUDA observer, else the queue."""
        observer = self.step_observer
        if observer is not None:
            observer(record)
        else:
            self.enqueue(record)

    def enqueue(self, record: StepRecord) -> None:
        """Queue one step record; drops (and counts) when the queue is full."""
        if len(self._steps) < self._qmax:
            self._steps.append(record)
        else:
            self.dropped += 1

    def fed_now(self) -> None:
        """A clock that sees input marked a boundary (outside any model call on this thread)."""
        if not self.tls.depth:
            self.fed += 1
            self.fed_thread = threading.get_ident()

    def add_collective(self, seconds: float) -> None:
        """Count time blocked in a collective (``hooks_dist``); the next step carries it."""
        self.collective_s += seconds
        self.collective_measured = True

    def clock(self, source: str) -> StepClock:
        """The step clock of one source (created on first use)."""
        c = self._clocks.get(source)
        if c is None:
            c = self._clocks[source] = StepClock(self, source)
        return c

    # -- rare events ----------------------------------------------------------------------

    def hook_applied(self, hook: str) -> None:
        """Report that a hook is now active."""
        self._skipped.pop(hook, None)
        if hook not in self._applied:
            self._applied.append(hook)
        self._info_dirty = True

    def hook_skipped(self, hook: str, reason: str) -> None:
        """Report that a hook did not (or no longer) apply, and why."""
        if hook in self._applied:
            self._applied.remove(hook)
        self._skipped[hook] = reason
        self._info_dirty = True

    def note_steps(self, source: str, note: str) -> None:
        """Say how the steps of ``source`` are measured (sent with the next info frame)."""
        if self._step_notes.get(source) != note:
            self._step_notes[source] = note
            self._info_dirty = True

    def is_disabled(self, hook: str) -> bool:
        """Whether settings switched this hook off."""
        return hook in self.settings.disabled_hooks

    def send_frame(self, frame: dict[str, Any]) -> None:
        """Queue a control frame (pipeline, workers, event); sent with the next batch."""
        if self.enabled:
            frame.setdefault("pid", self.pid)
            frame.setdefault("t", time.time())
            self._control.append(frame)

    def event(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        """Queue an Event for sofa-top."""
        self.send_frame({"type": "event", "kind": kind, "message": message, "data": data or {}})

    def fail(self, where: str, exc: BaseException) -> None:
        """An agent bug: say so once and switch the agent off; the workload goes on."""
        log_once(f"internal error in {where}: {exc!r}; telemetry stopped")
        self.event("agent-error", f"internal error in {where}: {exc!r}; telemetry stopped")
        self.enabled = False

    # -- frames ---------------------------------------------------------------------------

    def _info_frame(self) -> dict[str, Any]:
        frameworks = []
        for name in ("tensorflow", "keras", "torch"):
            mod = sys.modules.get(name)
            if mod is not None:
                frameworks.append([name, str(getattr(mod, "__version__", "?"))])
        return {
            "type": "info",
            "pid": self.pid,
            "t": time.time(),
            "python": sys.version.split()[0],
            "frameworks": frameworks,
            # copies are atomic under the GIL; hooks may change these from another thread
            "hooks_applied": self._applied.copy(),
            "hooks_skipped": [[h, r] for h, r in self._skipped.copy().items()],
            "dropped": self.dropped,
            "step_notes": [[k, v] for k, v in self._step_notes.copy().items()],
            "optimize": self.settings.optimize.to_json(),
            "settings_problems": list(self.settings.problems),
        }

    def _hello_frame(self) -> dict[str, Any]:
        frame = {
            "type": "hello",
            "v": protocol.PROTOCOL_VERSION,
            "pid": self.pid,
            "ppid": os.getppid(),
            "t": time.time(),
            "python": sys.version.split()[0],
            "argv": [str(a) for a in sys.argv] if hasattr(sys, "argv") else [],
            "settings": self.settings.to_json(),
            "mode": self.mode,
            "token": self.token,
        }
        rank = rank_from_env(os.environ, socket.gethostname())
        if rank is not None:
            frame["rank"] = rank
        return frame

    def _control_frames(self) -> Iterator[bytes]:
        while self._control:
            frame = self._control.popleft()
            try:
                yield protocol.encode(frame)
            except (protocol.FrameError, TypeError, ValueError) as e:
                log_once(f"dropped an unencodable {frame.get('type')!r} frame: {e}")

    def _steps_frame(self, most: int = _STEPS_PER_FRAME) -> bytes:
        """One frame of up to ``most`` queued steps, all of the same source (the queue is not
        empty)."""
        return steps_frame(self._steps, self.pid, self._offset, most)

    def _info_due(self) -> bool:
        return self._info_dirty or self.dropped != self._last_dropped

    def _info(self) -> bytes:
        self._info_dirty = False
        self._last_dropped = self.dropped
        return protocol.encode(self._info_frame())

    def _release(self, final: bool) -> None:
        hook = self.before_flush
        if hook is not None:
            try:
                hook(final)
            except Exception as e:
                self.before_flush = None
                log_once(f"internal error before a flush: {e!r}")

    def _flush(self) -> bool:
        """Send everything queued, a frame at a time; False once the connection is gone."""
        self._release(False)
        for data in self._control_frames():
            if not self._send(data):
                return False
        # hook changes and drop counts first: they matter more than a backlog of steps
        if self._info_due() and not self._send(self._info()):
            return False
        while self._steps and not self._stop.is_set():  # at exit, _final_flush takes over
            if not self._send(self._steps_frame()):
                return False
        return True

    def _final_flush(self) -> None:
        """At exit: send what fits in ``exit_flush_s`` (counted from the interpreter's exit: a
        send in flight then has used some), count the rest as dropped, say bye."""
        deadline = self._exit_deadline or time.perf_counter() + self.settings.exit_flush_s
        steps_until = deadline - self.settings.exit_flush_s / 2  # the rest: one frame, the bye
        self._release(True)
        for data in self._control_frames():
            if not self._send(data, deadline):
                return
        while self._steps:
            if time.perf_counter() > steps_until:
                left = len(self._steps)
                self._steps.clear()
                self.dropped += left
                break
            if not self._send(self._steps_frame(_EXIT_STEPS_PER_FRAME), deadline):
                return
        bye: dict[str, Any] = {
            "type": "bye",
            "pid": self.pid,
            "t": time.time(),
            "dropped": self.dropped,
        }
        error = _uncaught_error()
        if error:
            bye["error"] = error
        self._send(self._info() + protocol.encode(bye), deadline)

    def _send(self, data: bytes, deadline: float | None = None) -> bool:
        conn = self._conn
        if conn is None:
            return False
        with self._send_lock:
            try:
                if deadline is not None:
                    conn.set_timeout(max(deadline - time.perf_counter(), 0.01))
                conn.send(data)
            except (OSError, ValueError):
                # sofa-top is gone (or stuck): stop measuring, stay silent, let the workload run
                self.enabled = False
                return False
        return True

    # -- lifecycle ------------------------------------------------------------------------

    def start_thread(self) -> None:
        """Send the hello frame and start the drain thread."""
        if not self._send(protocol.encode(self._hello_frame())):
            return
        self._thread = threading.Thread(target=self._run, name="sofa-top-agent", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)
        # CPython cannot unregister a fork hook: after detach it finds nothing to do
        os.register_at_fork(after_in_child=self._after_fork_child)

    def detach(self, reason: str) -> list[str]:
        """Attach mode: stop measuring and leave the process as it was before the injection.

        Restores every patched function (``patches``), removes the import hook, stops the
        drain thread, closes the socket and forgets the atexit hook; returns what could not be
        restored. Safe from any thread, idempotent; the workload never sees an exception.
        """
        global AGENT
        if self.detached:
            return []
        self.detached = True
        self.enabled = False  # hooks fall through to the original from here on
        self._stop.set()
        self._wake.set()
        problems: list[str] = []
        try:
            if self.finder is not None:
                self.finder.uninstall()
            problems = self.patches.restore()
        except Exception as e:  # never let a restore problem reach the workload
            problems.append(repr(e))
        with contextlib.suppress(Exception):
            atexit.unregister(self._at_exit)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._steps.clear()
        self._control.clear()
        if AGENT is self:
            AGENT = None
        if problems:
            log_once(f"detached ({reason}); could not restore: {'; '.join(problems)}")
        return problems

    def _run(self) -> None:
        interval = self.settings.flush_interval_s
        try:
            while True:  # not on `enabled`: hooks may pause while the connection lives
                if self._stop.is_set():
                    if not self.detached:
                        self._final_flush()
                    return
                self._wake.wait(interval)
                output.flush()  # a partial line reaches sofa-top too, and survives a SIGTERM
                conn = self._conn
                # sofa-top never sends: end of stream means it closed (quit, Ctrl-C,
                # SIGKILL); put everything back and go. Checked without blocking at each wake,
                # so the thread wakes exactly as the launch agent's does.
                if self.mode == "attach" and conn is not None and conn.closed_by_peer():
                    self.detach("sofa-top closed the connection")
                    return
                if self._stop.is_set():
                    continue
                if not self._flush():
                    if self.mode == "attach":
                        self.detach("sofa-top is unreachable")
                    return
        except Exception as e:
            self.fail("the drain thread", e)
            if self.mode == "attach":
                self.detach("the agent failed")

    def _at_exit(self) -> None:
        if os.getpid() != self.pid or self._conn is None:
            return
        self._exit_deadline = time.perf_counter() + self.settings.exit_flush_s
        self._stop.set()
        self._wake.set()
        t = self._thread
        if t is not None and t.is_alive():
            # a stuck send (sofa-top hung) is abandoned: the exit is never held longer
            t.join(self.settings.exit_flush_s + 0.1)
        self.enabled = False
        if not (t is not None and t.is_alive()) and self._conn is not None:
            self._conn.close()

    def _after_fork_child(self) -> None:
        # a forked child (e.g. a DataLoader worker) has no drain thread: it stays silent; a
        # child that execs Python again gets its own agent through sitecustomize
        if self.detached:
            return
        self.enabled = False
        self.pid = os.getpid()
        # CUDA cannot be used in a forked child: its observer must never run there
        self.step_observer = None
        self.before_flush = None
        if self._conn is not None:
            self._conn.detach_after_fork()
            self._conn = None
        self._steps.clear()
        self._control.clear()


# -- lazy hooks -----------------------------------------------------------------------------


# The agent of this process, once ``sofa_top.agent.boot.start`` made one.
AGENT: Agent | None = None
