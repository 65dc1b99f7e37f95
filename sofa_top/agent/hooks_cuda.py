"""CUDA-aware steps (stdlib only at import; torch is touched only once the workload initialised
CUDA itself: this hook never creates a CUDA context).

torch-cuda
    Installed when the workload imports ``torch.cuda``; it then watches every step record the
    other hooks produce (``Agent.step_observer``). Once ``torch.cuda.is_initialized()``:

    - **GPU span per step**: a timing CUDA event is recorded on the current stream at each step
      boundary (a few microseconds of host time, no synchronisation). A step's record waits in a
      short queue until the GPU has passed its end event (``event.query()`` on earlier steps'
      events at later boundaries; never ``synchronize()``), then goes out with
      ``gpu_span_s = elapsed(start event, end event)``. A record whose GPU time does not come
      within ``PENDING_MAX_S`` goes out without it.
    - **Profiler windows**: every ``cuda_window_s`` a ``torch.profiler`` window (CUDA activity
      only) covers ``cuda_window_steps`` whole steps; its trace is read off the training thread
      (``cuda_trace.window_stats``): kernel busy time and the gaps between kernels, copies
      (pageable, blocking), launches, syncs. The window's steps carry its busy time per step
      (``gpu_busy_source="profiler"``); the steps after it carry the same busy time per step,
      capped by their own span (``"estimate"``). Closing a window synchronises the device
      once (``torch.profiler`` does, to collect the GPU's records): the only wait this hook
      causes, every ``cuda_window_s``. A step that begins with such work of this hook (over
      ``OWN_TIME_S``: CUPTI's first start can take a second) gets no busy time, and the
      window's wall time starts after it: the hook's own time is not the GPU's idle time.
    - **The allocator**: ``torch.cuda.memory_stats`` / ``mem_get_info`` every ``cuda_memory_s``.

    Everything is sent as ``cuda`` frames (``protocol``). A CUDA call that fails (a CUDA error in
    the workload, the GPU lost) switches the hook off with a ``cuda-error`` event; the workload's
    own next CUDA call then reports its own failure, and steps keep being sent without GPU time.

The CUDA calls sit behind ``CudaBackend``: ``TorchCudaBackend`` is the real one; tests drive the
hook with a fake (``use_backend``) because the machines they run on have no GPU.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

from sofa_top.agent import cuda_trace
from sofa_top.agent.core import Agent
from sofa_top.agent.step_record import StepRecord

HOOK = "torch-cuda"
PENDING_MAX_S = 5.0  # a step record waits at most this long for its GPU time
PENDING_MAX = 512  # ... and at most this many records wait
READY_CHECK_S = 0.5  # how often a loop without CUDA (yet) is checked again
WINDOW_MAX_S = 5.0  # a profiler window closes after this long even with fewer steps
# At the workload's exit, the most it waits for a window's trace to be read: a thread still in
# torch.profiler's C++ while the interpreter finalizes crashed the workload (SIGSEGV, 5 of 6
# runs of a VGG11 loop on an H200 whose last window closed at its end)
EXIT_JOIN_S = 3.0
OWN_TIME_S = 0.002  # this hook's own work at a boundary beyond this: the next step is tainted
_WAITING = "the workload has not initialised CUDA"


class CudaBackend(Protocol):
    """The CUDA calls of this hook; any of them may raise (a CUDA error)."""

    def ready(self) -> bool:
        """CUDA is initialised in this process (never initialises it)."""
        ...

    def capturing(self) -> bool:
        """The current stream is capturing a CUDA graph (no events may be recorded then)."""
        ...

    def device(self) -> dict[str, Any]:
        """``{index, name, capability, bf16_supported, mem_total}`` of the current device."""
        ...

    def record_event(self) -> object:
        """A timing event recorded on the current stream now."""
        ...

    def done(self, event: object) -> bool:
        """Whether the GPU has passed ``event`` (``cudaEventQuery``: no waiting)."""
        ...

    def elapsed_s(self, start: object, end: object) -> float:
        """GPU time between two passed events."""
        ...

    def memory(self, device: int) -> dict[str, Any]:
        """``{allocated, reserved, free, total, retries, ooms}`` of the caching allocator."""
        ...

    def start_profiler(self) -> None:
        """Start a CUDA-activity profiler window."""
        ...

    def stop_profiler(self) -> Callable[[], object]:
        """Stop the window; returns a function (run off the training thread) that gives its
        Chrome trace as a JSON object."""
        ...


class TorchCudaBackend:
    """The real CUDA, through the torch module the workload imported."""

    def __init__(self) -> None:
        self._prof: Any = None

    @staticmethod
    def _torch() -> Any:
        torch = sys.modules.get("torch")
        if torch is None:
            raise RuntimeError("torch is not imported")
        return torch

    def ready(self) -> bool:
        cuda = getattr(sys.modules.get("torch"), "cuda", None)
        is_init = getattr(cuda, "is_initialized", None)
        return bool(is_init is not None and is_init())

    def capturing(self) -> bool:
        return bool(self._torch().cuda.is_current_stream_capturing())

    def device(self) -> dict[str, Any]:
        cuda = self._torch().cuda
        index = int(cuda.current_device())
        props = cuda.get_device_properties(index)
        try:
            bf16: bool | None = bool(cuda.is_bf16_supported(including_emulation=False))
        except TypeError:  # an older torch without the argument
            bf16 = bool(cuda.is_bf16_supported())
        return {
            "index": index,
            "name": str(props.name),
            "capability": f"{props.major}.{props.minor}",
            "bf16_supported": bf16,
            "mem_total": int(props.total_memory),
        }

    def record_event(self) -> object:
        event = self._torch().cuda.Event(enable_timing=True)
        event.record()
        return event

    def done(self, event: object) -> bool:
        return bool(event.query())  # type: ignore[attr-defined]

    def elapsed_s(self, start: object, end: object) -> float:
        return float(start.elapsed_time(end)) / 1000.0  # type: ignore[attr-defined]

    def memory(self, device: int) -> dict[str, Any]:
        cuda = self._torch().cuda
        stats = cuda.memory_stats(device)
        free, total = cuda.mem_get_info(device)
        return {
            "allocated": stats.get("allocated_bytes.all.current"),
            "reserved": stats.get("reserved_bytes.all.current"),
            "free": int(free),
            "total": int(total),
            "retries": stats.get("num_alloc_retries"),
            "ooms": stats.get("num_ooms"),
        }

    def start_profiler(self) -> None:
        import importlib

        # by name: the agent never imports torch statically
        profiler = importlib.import_module("torch.profiler")
        prof = profiler.profile(activities=[profiler.ProfilerActivity.CUDA])
        prof.start()
        self._prof = prof

    def stop_profiler(self) -> Callable[[], object]:
        prof, self._prof = self._prof, None
        if prof is None:
            raise RuntimeError("no profiler window is running")
        prof.stop()
        return lambda: _export(prof)


def _export(prof: Any) -> object:
    fd, path = tempfile.mkstemp(prefix="sofa-top-cuda-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


class _Window:
    __slots__ = ("busy_per_step", "done", "start", "steps", "wait")

    def __init__(self, start: float) -> None:
        self.start = start
        self.steps = 0
        self.wait = 0.0
        self.done = False
        self.busy_per_step: float | None = None


class _Pending:
    __slots__ = ("end", "record", "start", "t", "tainted", "window")

    def __init__(
        self,
        record: StepRecord,
        start: object,
        end: object,
        window: _Window | None,
        t: float,
        tainted: bool,
    ) -> None:
        self.record = record
        self.start = start
        self.end = end
        self.window = window
        self.t = t
        # the step began with this hook's own work (a profiler start or stop, an allocator
        # reading): its wall time is not the workload's, so it gets no busy time
        self.tainted = tainted


class CudaSteps:
    """The step observer (``Agent.step_observer``): GPU time per step, windows, memory."""

    def __init__(self, agent: Agent, backend: CudaBackend) -> None:
        self.agent = agent
        self.backend = backend
        s = agent.settings
        self.window_every = s.cuda_window_s
        self.first_window = s.cuda_first_window_s
        self.window_steps = s.cuda_window_steps
        self.memory_every = s.cuda_memory_s
        self.active = False
        self.device = 0
        self.info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._prev: dict[str, tuple[float, object]] = {}
        self._next_check = 0.0
        self._next_window = float("inf")
        self._next_memory = 0.0
        self._window: _Window | None = None
        self._finishing: threading.Thread | None = None  # reading a window's trace
        self.pid = os.getpid()
        self._windows_off = self.window_every <= 0
        self._busy_per_step: float | None = None
        self._memory: dict[str, Any] = {}
        self._taken = False  # the current record is in the pending queue
        self._tainted = False  # this hook spent OWN_TIME_S or more at the last boundary

    # -- the training thread, at each step boundary -------------------------------------------

    def __call__(self, record: StepRecord) -> None:
        self._taken = False
        try:
            self._step(record)
        except Exception as e:
            self.stop(f"{type(e).__name__}: {e}")
            if not self._taken:  # else it went out with the pending ones
                self.agent.enqueue(record)

    def _step(self, record: StepRecord) -> None:
        now = time.perf_counter()
        if not self.active and (now < self._next_check or not self._activate(now)):
            self.agent.enqueue(record)
            return
        b = self.backend
        source, start, end = record.source, record.start, record.end
        end_ev: object | None = None if b.capturing() else b.record_event()
        prev = self._prev.get(source)
        start_ev = prev[1] if prev is not None and prev[0] == start else None
        if end_ev is not None:
            self._prev[source] = (end, end_ev)
        else:
            self._prev.pop(source, None)
        window = self._window
        if window is not None:
            window.steps += 1
            window.wait += record.wait
        tainted = self._tainted and start_ev is not None
        with self._lock:
            self._pending.append(_Pending(record, start_ev, end_ev, window, now, tainted))
            self._taken = True
            self._poll()
        self._window_tick(now)
        if now >= self._next_memory:
            self._next_memory = now + self.memory_every
            self._read_memory()
        # the next step starts at this boundary: it carries what this hook just spent
        self._tainted = time.perf_counter() - now > OWN_TIME_S

    def _activate(self, now: float) -> bool:
        self._next_check = now + READY_CHECK_S
        if not self.backend.ready():
            return False
        self.info = self.backend.device()
        self.device = int(self.info.get("index") or 0)
        self.active = True
        self._next_window = now + self.first_window
        self.agent.hook_applied(HOOK)
        return True

    def _poll(self) -> None:
        """Send the records whose GPU time is known, oldest first (under ``_lock``)."""
        pending = self._pending
        while pending:
            p = pending[0]
            window = p.window
            if window is not None and not window.done:
                break
            waiting = p.end is not None and not self.backend.done(p.end)
            # on another stream (the loop switched streams) the start may still be ahead
            waiting = waiting or (p.start is not None and not self.backend.done(p.start))
            if waiting:
                if len(pending) <= PENDING_MAX:
                    break
                pending.popleft()
                self.agent.enqueue(p.record)
                continue
            pending.popleft()
            self._send(p)

    def _send(self, p: _Pending) -> None:
        span: float | None = None
        if p.start is not None and p.end is not None:
            span = max(0.0, self.backend.elapsed_s(p.start, p.end))
        busy: float | None = None
        source = 0
        window = p.window
        if p.tainted:
            pass
        elif window is not None and window.busy_per_step is not None:
            busy, source = window.busy_per_step, 1
        elif self._busy_per_step is not None and span is not None:
            busy, source = self._busy_per_step, 2
        if busy is not None and span is not None:
            busy = min(busy, span)
        record = p.record
        record.gpu_span, record.gpu_busy, record.busy_source = span, busy, source
        record.gpu_timed = True
        self.agent.enqueue(record)

    def _window_tick(self, now: float) -> None:
        w = self._window
        if w is None:
            if self._windows_off or now < self._next_window:
                return
            try:
                self.backend.start_profiler()
            except Exception as e:  # the workload profiles itself, or CUPTI is missing
                self._windows_off = True
                self.agent.event(
                    "cuda-error",
                    f"no CUDA profiler windows: {type(e).__name__}: {e}",
                    {"reading": "profiler window", "reason": f"{type(e).__name__}: {e}"},
                )
                return
            # from after the start: CUPTI's first start can take a second, not the GPU's time
            self._window = _Window(time.perf_counter())
            return
        if w.steps < self.window_steps and now - w.start < WINDOW_MAX_S:
            return
        self._window = None
        wall = now - w.start
        try:
            export = self.backend.stop_profiler()
        except Exception as e:
            w.done = True
            self._windows_off = True
            self._send_cuda(f"profiler window: {type(e).__name__}: {e}")
            return
        self._next_window = time.perf_counter() + self.window_every
        self._finishing = threading.Thread(
            target=self._finish_window,
            args=(w, export, wall),
            name="sofa-top-cuda-window",
            daemon=True,
        )
        self._finishing.start()

    def _finish_window(self, w: _Window, export: Callable[[], object], wall: float) -> None:
        """Off the training thread: read the window's trace, then let its steps go."""
        error: str | None = None
        stats: dict[str, Any] | None = None
        try:
            stats = cuda_trace.window_stats(export(), w.steps, wall, w.wait, self.device)
            w.busy_per_step = stats["busy_s"] / max(1, w.steps)
            self._busy_per_step = w.busy_per_step
        except Exception as e:
            error = f"profiler window: {type(e).__name__}: {e}"
        finally:
            w.done = True
        self._send_cuda(error, stats)

    def _read_memory(self) -> None:
        try:
            self._memory = self.backend.memory(self.device)
            error = None
        except Exception as e:  # one reading failed; the step times carry on
            error = f"memory: {type(e).__name__}: {e}"
        self._send_cuda(error)

    def _send_cuda(self, error: str | None, window: dict[str, Any] | None = None) -> None:
        m, d = self._memory, self.info
        self.agent.send_frame(
            {
                "type": "cuda",
                "device": self.device,
                "device_name": str(d.get("name", "")),
                "bf16_supported": d.get("bf16_supported"),
                "capability": str(d.get("capability", "")),
                "mem_allocated": m.get("allocated"),
                "mem_reserved": m.get("reserved"),
                "mem_total": m.get("total", d.get("mem_total")),
                "mem_free": m.get("free"),
                "alloc_retries": m.get("retries"),
                "ooms": m.get("ooms"),
                "window": window,
                "error": error,
            }
        )

    # -- the drain thread ---------------------------------------------------------------------

    def release(self, final: bool) -> None:
        """Send records that waited too long (all of them at exit) without their GPU time."""
        cutoff = time.perf_counter() - PENDING_MAX_S
        with self._lock:
            pending = self._pending
            while pending and (final or pending[0].t < cutoff):
                self.agent.enqueue(pending.popleft().record)

    def at_exit(self) -> None:
        """At the workload's exit, before the interpreter finalizes: no profiler window left
        running and no trace left being read (either crashes a finalizing interpreter)."""
        if os.getpid() != self.pid:  # a forked child inherits the handler, not the windows
            return
        w, self._window = self._window, None
        if w is not None:
            w.done = True
            with contextlib.suppress(Exception):
                self.backend.stop_profiler()
        t = self._finishing
        if t is not None and t.is_alive():
            t.join(EXIT_JOIN_S)

    def stop(self, reason: str) -> None:
        """Switch the hook off after a failing CUDA call; the steps go on without GPU time."""
        agent = self.agent
        agent.step_observer = None
        agent.before_flush = None
        self.active = False
        self.release(True)
        agent.hook_skipped(HOOK, f"stopped: {reason}")
        agent.event(
            "cuda-error",
            f"CUDA readings stopped: {reason}",
            {"reading": "gpu step time", "reason": reason},
        )


_override: CudaBackend | None = None
_observer: CudaSteps | None = None


def use_backend(backend: CudaBackend) -> None:
    """Use ``backend`` instead of the real CUDA (tests: their machines have no GPU)."""
    global _override
    _override = backend
    if _observer is not None:
        _observer.backend = backend


def install(agent: Agent, module: ModuleType) -> None:
    """Watch the steps for CUDA (installed on ``torch.cuda``'s import)."""
    global _observer
    observer = CudaSteps(agent, _override or TorchCudaBackend())
    _observer = observer
    agent.step_observer = observer
    agent.before_flush = observer.release
    # registered after the agent's own exit handler, so it runs first (atexit is last-in
    # first-out): the windows are closed before the agent's last flush
    atexit.register(observer.at_exit)
    agent.patches.on_detach(
        "the CUDA windows' exit handler", lambda: atexit.unregister(observer.at_exit)
    )
    agent.hook_skipped(HOOK, _WAITING)
