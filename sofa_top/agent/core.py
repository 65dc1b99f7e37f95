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
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sofa_top.agent import output, protocol
from sofa_top.agent.settings import (
    HOOK_NAMES,
    AgentSettings,
)
from sofa_top.agent.transport import Connection

_STEPS_PER_FRAME = 1024  # ~100 bytes each: frames far below MAX_FRAME, sent one by one
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


class HookSkipped(Exception):
    """Raised by an installer when its hook cannot apply; the message is the reason."""


if TYPE_CHECKING:  # aliases only for the checker: the agent also runs on Python 3.8
    # source, step, start, end, wait, batch size, process CPU during the wait (< 0: unknown)
    StepRecord = tuple[str, int, float, float, float, int | None, float]
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

    def __next__(self: Any) -> Any:
        if not agent.enabled:
            return orig(self)
        c0 = cpu()
        t0 = perf()
        try:
            value = orig(self)
        except StopIteration:
            t1 = perf()
            try:
                clock.exhausted(self, t0, t1, cpu() - c0)
            except Exception as e:
                agent.fail(where, e)
            raise
        t1 = perf()
        c1 = cpu()
        try:
            new = clock.fetched(self, t0, t1, c1 - c0)
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
    on batch ``n`` followed by the wait for batch ``n + 1`` (its ``input_wait_s``). Switching to
    another iterator restarts the clock, so no step spans two iterators. ``cpu`` is the CPU time
    the whole process used during the wait (all its threads: tf.data's pool, a DataLoader
    running in the loop's thread); it tells input work from waiting on I/O. Negative: unknown.
    """

    __slots__ = ("_agent", "_bs", "_cur", "_last", "resolve_batch_size", "source", "step")

    def __init__(self, agent: Agent, source: str) -> None:
        self._agent = agent
        self.source = source
        self.step = 0
        self._cur: Callable[[], object] | None = None
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

    def fetched(self, it: object, t0: float, t1: float, cpu: float = -1.0) -> bool:
        """Record one fetch of ``it`` that ran from ``t0`` to ``t1`` (perf_counter).

        Returns True when ``it`` is a new iterator (no step was recorded)."""
        cur = self._cur
        if cur is None or cur() is not it:
            self._switch(it)
            self._last = t1
            return True
        self._agent.push((self.source, self.step, self._last, t1, t1 - t0, self._bs, cpu))
        self.step += 1
        self._last = t1
        return False

    def exhausted(self, it: object, t0: float, t1: float, cpu: float = -1.0) -> None:
        """A fetch of ``it`` found no more data: close the last step, forget the iterator."""
        cur = self._cur
        if cur is not None and cur() is it:
            self._agent.push((self.source, self.step, self._last, t1, t1 - t0, self._bs, cpu))
            self.step += 1
        self._cur = None

    def span(self, it: object, t0: float, t1: float, t2: float, cpu: float = -1.0) -> None:
        """A step that fetched from ``it`` (``t0``..``t1``) then computed until ``t2``.

        It starts where the previous step of the same iterator ended, else at its fetch."""
        cur = self._cur
        if cur is None or cur() is not it:
            self._switch(it)
            start = t0
        else:
            start = self._last
        self._agent.push((self.source, self.step, start, t2, t1 - t0, self._bs, cpu))
        self.step += 1
        self._last = t2

    def span_many(self, it: object, t0: float, t2: float, wait: float, n: int) -> None:
        """``n`` steps that ran in one call from ``t0`` to ``t2`` (their fetches inside it),
        waiting ``wait`` seconds for input in all: each gets an equal share of both."""
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
            push((self.source, self.step, start + i * each, end, w, self._bs, -1.0))
            self.step += 1
        self._last = t2

    def tick(self, t: float) -> None:
        """A step boundary with no iterator (e.g. after each optimizer step); no input wait."""
        if self._cur is not None:
            self._agent.push((self.source, self.step, self._last, t, 0.0, self._bs, 0.0))
            self.step += 1
        self._cur = _ALWAYS
        self._last = t

    def reset(self) -> None:
        """Forget the last boundary (the next fetch or tick starts a new run of steps)."""
        self._cur = None


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

    def __init__(self, settings: AgentSettings, conn: Connection | None) -> None:
        self.settings = settings
        self.enabled = conn is not None
        self.pid = os.getpid()
        self.dropped = 0
        self._conn = conn
        self._qmax = settings.queue_max
        self._steps: collections.deque[StepRecord] = collections.deque()
        self._control: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self._wake = threading.Event()
        self._stop = threading.Event()
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
        self._step_notes: dict[str, str] = {}  # source -> how its steps are measured

    # -- hot path -------------------------------------------------------------------------

    def push(self, record: StepRecord) -> None:
        """Queue one step record; never blocks, drops (and counts) when the queue is full."""
        if len(self._steps) < self._qmax:
            self._steps.append(record)
        else:
            self.dropped += 1

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
        return {
            "type": "hello",
            "v": protocol.PROTOCOL_VERSION,
            "pid": self.pid,
            "ppid": os.getppid(),
            "t": time.time(),
            "python": sys.version.split()[0],
            "argv": [str(a) for a in sys.argv] if hasattr(sys, "argv") else [],
            "settings": self.settings.to_json(),
        }

    def _control_frames(self) -> Iterator[bytes]:
        while self._control:
            frame = self._control.popleft()
            try:
                yield protocol.encode(frame)
            except (protocol.FrameError, TypeError, ValueError) as e:
                log_once(f"dropped an unencodable {frame.get('type')!r} frame: {e}")

    def _steps_frame(self) -> bytes:
        """One frame of queued steps, all of the same source (the queue is not empty)."""
        steps = self._steps
        off = self._offset
        source = steps[0][0]
        data: list[int | None] = []
        limit = _STEPS_PER_FRAME * len(protocol.STEP_FIELDS)
        while steps and len(data) < limit and steps[0][0] == source:
            _, n, start, end, wait, bs, cpu = steps.popleft()
            # a step's start is the previous one's end (same float): they stay equal in µs
            data += (
                n,
                int((start + off) * 1e6),
                int((end + off) * 1e6),
                int(wait * 1e6),
                bs,
                int(cpu * 1e6) if cpu >= 0 else None,
            )
        return protocol.encode({"type": "steps", "pid": self.pid, "source": source, "data": data})

    def _info_due(self) -> bool:
        return self._info_dirty or self.dropped != self._last_dropped

    def _info(self) -> bytes:
        self._info_dirty = False
        self._last_dropped = self.dropped
        return protocol.encode(self._info_frame())

    def _flush(self) -> bool:
        """Send everything queued, a frame at a time; False once the connection is gone."""
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
        """At exit: send what fits in ``exit_flush_s``, count the rest as dropped, say bye."""
        deadline = time.perf_counter() + self.settings.exit_flush_s
        for data in self._control_frames():
            if not self._send(data, deadline):
                return
        while self._steps:
            if time.perf_counter() > deadline - self.settings.exit_flush_s / 4:
                left = len(self._steps)
                self._steps.clear()
                self.dropped += left
                break
            if not self._send(self._steps_frame(), deadline):
                return
        bye = {"type": "bye", "pid": self.pid, "t": time.time(), "dropped": self.dropped}
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
        os.register_at_fork(after_in_child=self._after_fork_child)

    def _run(self) -> None:
        interval = self.settings.flush_interval_s
        try:
            while True:  # not on `enabled`: hooks may pause while the connection lives
                if self._stop.is_set():
                    self._final_flush()
                    return
                self._wake.wait(interval)
                output.flush()  # a partial line reaches sofa-top too, and survives a SIGTERM
                if self._stop.is_set():
                    continue
                if not self._flush():
                    return
        except Exception as e:
            self.fail("the drain thread", e)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid or self._conn is None:
            return
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
        self.enabled = False
        self.pid = os.getpid()
        if self._conn is not None:
            self._conn.detach_after_fork()
            self._conn = None
        self._steps.clear()
        self._control.clear()


# -- lazy hooks -----------------------------------------------------------------------------


class _HookingLoader(importlib.abc.Loader):
    """Runs the real loader, puts it back on the module, then calls the hook installer."""

    def __init__(
        self,
        loader: importlib.abc.Loader,
        spec: importlib.machinery.ModuleSpec,
        after: Callable[[ModuleType], None],
    ) -> None:
        self._loader = loader
        self._spec = spec
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            # from here on the module looks exactly as if we had never been there
            self._spec.loader = self._loader
            module.__loader__ = self._loader
        self._after(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Applies installers right after the workload itself imports the watched modules."""

    def __init__(
        self, agent: Agent, installers: dict[str, Sequence[tuple[str, Installer]]]
    ) -> None:
        self._agent = agent
        self._pending = dict(installers)

    def install(self) -> None:
        """Put the finder first on sys.meta_path, and apply hooks of already-imported modules."""
        for name in list(self._pending):
            mod = sys.modules.get(name)
            if mod is not None:
                self._apply(name, mod)
        if self._pending:
            sys.meta_path.insert(0, self)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        spec.loader = _HookingLoader(loader, spec, lambda m: self._apply(fullname, m))
        return spec  # type: ignore[no-any-return]

    def _apply(self, name: str, module: ModuleType) -> None:
        entries = self._pending.pop(name, ())
        if not self._pending:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
        for hook, installer in entries:
            if self._agent.is_disabled(hook):
                continue
            try:
                installer(self._agent, module)
            except HookSkipped as e:
                self._agent.hook_skipped(hook, str(e))
            except Exception as e:
                self._agent.hook_skipped(hook, f"install failed: {e!r}")


# The agent of this process, once ``sofa_top.agent.boot.start`` made one.
AGENT: Agent | None = None
