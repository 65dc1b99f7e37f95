"""A FAKE CUDA backend for ``sofa_top.agent.hooks_cuda``: NO GPU, NO CUDA, NO HARDWARE.

The machines the tests run on have no NVIDIA GPU, so this stands in for ``TorchCudaBackend``
(``hooks_cuda.use_backend(FakeCuda(shape))``). It models the GPU's side of a training loop:
an event recorded at host time t is passed by the GPU at t (after ``lag`` queries, so the hook's
lazy reading is exercised), and a profiler window's trace is written in the format
``torch.profiler`` (Kineto) exports, laid out over the window's real step boundaries. Where the
loop waits for the GPU, the workload calls ``sync()`` after its loss (as ``loss.item()`` would
wait): it sleeps until the modelled GPU work of the step, begun at the step's start, is done.
Per shape:

- ``compute``: 60 ms of kernels per step (95% dense), the host waiting for them: GPU-bound;
- ``launch``: 2 us kernels every 25 us over 90% of each step (the gaps: Python dispatching
  the next op), then the loss sync;
- ``input``: 3 ms of kernels at the start of each step, then idle while the loop waits;
- ``copy``: a 10 ms pageable, blocking host-to-device copy per step (the host waits for it),
  then 0.5 ms of kernels;
- ``cpu``: 2 ms of kernels per step, then one long idle gap (the host's own work);
- ``memory``: 4 ms of kernels per step, the allocator holding 97% of the card and retrying.

``fail_after``: from that event on every call raises the error a GPU that fell off the bus
gives ("CUDA error: unspecified launch failure").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

GIB = 1024**3
COMPUTE_S = 0.060
COPY_S = 0.010
SHAPES = ("compute", "launch", "input", "copy", "cpu", "memory")
NAME = "FAKE GPU (tests/workloads/fake_cuda.py: no hardware)"


class _Event:
    __slots__ = ("queries", "t")

    def __init__(self, t: float) -> None:
        self.t = t
        self.queries = 0


class FakeCuda:
    """Implements ``hooks_cuda.CudaBackend`` without any GPU (see the module doc)."""

    def __init__(self, shape: str, *, lag: int = 1, fail_after: int | None = None) -> None:
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
        self.shape = shape
        self.lag = lag
        self.fail_after = fail_after
        self.events = 0
        self._window: list[float] | None = None
        self._retries = 0
        self._last = time.perf_counter()  # the last step boundary

    def _check(self) -> None:
        if self.fail_after is not None and self.events >= self.fail_after:
            raise RuntimeError("CUDA error: unspecified launch failure (fake: GPU off the bus)")

    def ready(self) -> bool:
        return True

    def capturing(self) -> bool:
        self._check()
        return False

    def device(self) -> dict[str, Any]:
        return {
            "index": 0,
            "name": NAME,
            "capability": "9.0",
            "bf16_supported": True,
            "mem_total": 80 * GIB,
        }

    def record_event(self) -> object:
        self._check()
        self.events += 1
        t = self._last = time.perf_counter()
        if self._window is not None:
            self._window.append(t)
        return _Event(t)

    def done(self, event: object) -> bool:
        self._check()
        assert isinstance(event, _Event)
        event.queries += 1
        return event.queries > self.lag

    def elapsed_s(self, start: object, end: object) -> float:
        self._check()
        assert isinstance(start, _Event) and isinstance(end, _Event)
        return end.t - start.t

    def memory(self, device: int) -> dict[str, Any]:
        self._check()
        total = 80 * GIB
        if self.shape == "memory":
            self._retries += 3
            return {
                "allocated": int(0.90 * total),
                "reserved": int(0.97 * total),
                "free": int(0.02 * total),
                "total": total,
                "retries": self._retries,
                "ooms": 0,
            }
        return {
            "allocated": 6 * GIB,
            "reserved": 8 * GIB,
            "free": total - 9 * GIB,
            "total": total,
            "retries": 0,
            "ooms": 0,
        }

    def sync(self) -> None:
        """The workload's wait for the GPU at the end of a step (``loss.item()``)."""
        if self.shape == "compute":
            time.sleep(max(0.0, self._last + COMPUTE_S - time.perf_counter()))
        elif self.shape == "copy":
            time.sleep(COPY_S)  # a blocking copy: the host waits, then computes

    def start_profiler(self) -> None:
        self._check()
        self._window = [time.perf_counter()]

    def stop_profiler(self) -> Callable[[], object]:
        self._check()
        bounds = self._window or []
        bounds.append(time.perf_counter())
        self._window = None
        return lambda: trace(self.shape, bounds)


def _kernel(events: list[dict[str, Any]], ts: float, dur: float, name: str, corr: int) -> None:
    events.append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": ts - 4.0, "dur": 3.0, "args": {"correlation": corr}}
    )  # fmt: skip
    events.append(
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
         "args": {"device": 0, "stream": 7, "correlation": corr}}
    )  # fmt: skip


def _copy(events: list[dict[str, Any]], ts: float, dur: float, corr: int) -> None:
    events.append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
         "ts": ts - 5.0, "dur": 4.0, "args": {"correlation": corr}}
    )  # fmt: skip
    events.append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
         "ts": ts - 0.5, "dur": dur + 1.0, "args": {"correlation": corr + 1}}
    )  # fmt: skip
    events.append(
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": 7, "ts": ts, "dur": dur,
         "args": {"device": 0, "stream": 7, "correlation": corr, "bytes": int(dur * 6000)}}
    )  # fmt: skip


def trace(shape: str, bounds: list[float]) -> dict[str, Any]:
    """A Kineto-format trace of ``shape``'s GPU activity between the host's step boundaries
    ``bounds`` (perf_counter seconds; the first is the window's start)."""
    events: list[dict[str, Any]] = []
    corr = 1
    # the last bound is the stop, right after the last step's boundary: no step of its own
    # (told by position, not by length: a tiny loop's steps are short on a fast machine)
    for a, b in itertools.pairwise(bounds[:-1]):
        t0, step = a * 1e6, (b - a) * 1e6  # microseconds
        if shape == "compute":
            n = 20
            each = COMPUTE_S * 1e6 * 0.95 / n
            for k in range(n):
                _kernel(events, t0 + k * COMPUTE_S * 1e6 / n, each, "sm90_xmma_gemm_f32", corr)
                corr += 1
        elif shape == "launch":
            t = t0
            while t + 25.0 < t0 + 0.9 * step:
                _kernel(events, t, 2.0, "void at::native::vectorized_elementwise_kernel", corr)
                corr += 1
                t += 25.0
        elif shape in ("input", "cpu", "memory"):
            ms = {"input": 3, "cpu": 2, "memory": 4}[shape]
            for k in range(ms):
                _kernel(events, t0 + k * 1000.0, 995.0, "void implicit_convolve_sgemm", corr)
                corr += 1
        elif shape == "copy":
            _copy(events, t0 + 10.0, COPY_S * 1e6, corr)
            corr += 2
            _kernel(events, t0 + COPY_S * 1e6 + 50.0, 500.0, "ampere_sgemm_64x32_nn", corr)
            corr += 1
    return {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}
