"""The CUDA step observer (``sofa_top.agent.hooks_cuda``) and its trace reader.

NOTE: no test machine has a GPU. These tests drive the observer with ``FakeCuda``
(tests/workloads/fake_cuda.py), a MODELLED GPU that says so, and the trace reader with
hand-made traces in the format torch.profiler (Kineto) exports. The last test uses the real
``TorchCudaBackend`` on this machine's CPU-only torch: it must never initialise CUDA.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sofa_top.agent import hooks_cuda, protocol
from sofa_top.agent.core import Agent
from sofa_top.agent.cuda_trace import SHORT_GAP_S, window_stats
from sofa_top.agent.settings import AgentSettings
from sofa_top.agent.step_record import StepRecord
from sofa_top.collectors.agent_frames import convert_frame
from sofa_top.datamodel.samples import CudaSample, StepSample

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))
from fake_cuda import NAME, FakeCuda


def _agent(**settings: Any) -> Agent:
    base = {"cuda_first_window_s": 3600.0, "cuda_memory_s": 3600.0, **settings}
    agent = Agent(AgentSettings(**base), None)
    agent.enabled = True  # no connection: frames stay queued, for the test to read
    return agent


def _observer(agent: Agent, backend: hooks_cuda.CudaBackend) -> hooks_cuda.CudaSteps:
    obs = hooks_cuda.CudaSteps(agent, backend)
    agent.step_observer = obs
    agent.before_flush = obs.release
    return obs


class _Loop:
    """Step records as a DataLoader clock makes them: each starts where the last ended."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.last = time.perf_counter()
        self.n = 0

    def step(self, work_s: float = 0.002, wait_s: float = 0.0) -> None:
        end = self.last + work_s + wait_s
        while time.perf_counter() < end:  # the step's own time
            pass
        now = time.perf_counter()
        self.agent.push(StepRecord("torch-dataloader", self.n, self.last, now, wait_s, 16))
        self.n += 1
        self.last = now


def _queued(agent: Agent) -> list[StepRecord]:
    return list(agent._steps)


def _frames(agent: Agent, kind: str) -> list[dict[str, Any]]:
    return [f for f in agent._control if f.get("type") == kind]


def test_gpu_span_is_read_lazily_and_never_waits() -> None:
    agent = _agent()
    fake = FakeCuda("compute", lag=2)
    _observer(agent, fake)
    loop = _Loop(agent)
    loop.step()
    loop.step()
    # the GPU has not passed the events yet (lag 2): nothing goes out, nothing waits
    assert _queued(agent) == []
    for _ in range(4):
        loop.step()
    out = _queued(agent)
    assert [r.step for r in out] == list(range(len(out))) and 2 <= len(out) <= 4
    first, *rest = out
    assert first.gpu_span is None  # the first step has no start event: no span
    for r in rest:
        assert r.gpu_timed
        # FakeCuda keeps up with the host: the GPU passes each event when it is recorded
        assert r.gpu_span == pytest.approx(r.end - r.start, abs=0.005)
        assert (r.gpu_busy, r.busy_source) == (None, 0)  # no profiler window yet: busy unknown
    assert "torch-cuda" in agent._applied


def test_window_busy_goes_to_its_steps_and_estimates_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a boundary preempted beside busy neighbours reads as the hook's own time and taints the
    # next step (the next test's subject): here every step of the window must get its busy time
    monkeypatch.setattr(hooks_cuda, "OWN_TIME_S", float("inf"))
    agent = _agent(cuda_first_window_s=0.0, cuda_window_steps=3, cuda_window_s=3600.0)
    obs = _observer(agent, FakeCuda("input", lag=0))
    loop = _Loop(agent)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        loop.step(work_s=0.004, wait_s=0.006)
        if any(r.busy_source == 2 for r in _queued(agent)) and _frames(agent, "cuda"):
            break
    rows = _queued(agent)
    profiled = [r for r in rows if r.busy_source == 1]
    estimated = [r for r in rows if r.busy_source == 2]
    assert len(profiled) == 3, rows
    # FakeCuda "input": 3 kernels of 995 us at the start of each step
    for r in profiled:
        assert r.gpu_busy == pytest.approx(3 * 995e-6, rel=0.01)
    for r in estimated:
        assert r.gpu_busy == pytest.approx(min(3 * 995e-6, r.gpu_span), rel=0.01)
    (window,) = [f["window"] for f in _frames(agent, "cuda") if f["window"]]
    assert window["steps"] == 3 and window["kernels"] == 9
    assert window["busy_s"] == pytest.approx(9 * 995e-6, rel=0.01)
    assert window["input_wait_s"] == pytest.approx(3 * 0.006, rel=0.01)
    assert obs._window is None  # closed after its steps


def test_the_hooks_own_time_is_not_counted_as_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # the 50 ms start taints its step; a boundary preempted for a few ms beside busy
    # neighbours must not taint the window's other steps
    monkeypatch.setattr(hooks_cuda, "OWN_TIME_S", 0.025)

    class SlowStart(FakeCuda):
        def start_profiler(self) -> None:
            time.sleep(0.05)  # CUPTI's first start can take far longer than a step
            super().start_profiler()

    agent = _agent(cuda_first_window_s=0.0, cuda_window_steps=3, cuda_window_s=3600.0)
    _observer(agent, SlowStart("input", lag=0))
    loop = _Loop(agent)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(f["window"] for f in _frames(agent, "cuda")):
        loop.step(work_s=0.004, wait_s=0.006)
    for _ in range(4):  # the window's steps go out at the next boundaries
        loop.step(work_s=0.004, wait_s=0.006)
    rows = _queued(agent)
    first = next(i for i, r in enumerate(rows) if r.end - r.start > 0.04)  # the step that waited
    assert (rows[first].gpu_busy, rows[first].busy_source) == (None, 0)  # no busy time for it
    # the window's other steps
    assert [r.busy_source for r in rows[first + 1 : first + 3]] == [1, 1]
    (window,) = [f["window"] for f in _frames(agent, "cuda") if f["window"]]
    assert window["wall_s"] < 3 * 0.010 + 0.03  # the 50 ms start is not in the window


def test_a_cuda_error_switches_the_hook_off_and_steps_go_on() -> None:
    agent = _agent()
    fake = FakeCuda("compute", lag=0, fail_after=3)
    _observer(agent, fake)
    loop = _Loop(agent)
    for _ in range(8):
        loop.step()  # never raises into the workload
    assert agent.step_observer is None and agent.before_flush is None
    rows = _queued(agent)
    assert [r.step for r in rows] == list(range(8))  # every step went out, in order
    assert not any(r.gpu_timed for r in rows[3:])  # after the failure: the base record, no GPU
    (event,) = [f for f in agent._control if f.get("kind") == "cuda-error"]
    assert "unspecified launch failure" in event["message"]
    assert dict(agent._skipped)["torch-cuda"].startswith("stopped: RuntimeError: CUDA error")


def test_records_waiting_too_long_are_released_without_gpu_time() -> None:
    agent = _agent()
    _observer(agent, FakeCuda("compute", lag=10**6))  # a GPU that never gets there
    loop = _Loop(agent)
    loop.step()
    loop.step()
    assert _queued(agent) == []
    agent._release(True)  # the exit flush
    assert [r.gpu_timed for r in _queued(agent)] == [False, False]


def test_capturing_a_cuda_graph_records_no_event() -> None:
    class Capturing(FakeCuda):
        def capturing(self) -> bool:
            return True

    agent = _agent()
    fake = Capturing("compute", lag=0)
    _observer(agent, fake)
    loop = _Loop(agent)
    for _ in range(3):
        loop.step()
    assert fake.events == 0
    assert [r.gpu_span for r in _queued(agent)] == [None, None, None]


def test_memory_readings_and_device_go_out_as_cuda_frames() -> None:
    agent = _agent(cuda_memory_s=0.1)
    _observer(agent, FakeCuda("memory", lag=0))
    loop = _Loop(agent)
    loop.step()
    frames = _frames(agent, "cuda")
    assert frames and frames[0]["device_name"] == NAME and frames[0]["bf16_supported"] is True
    (sample,) = convert_frame({**frames[0], "t": time.time()}, 42)
    assert isinstance(sample, CudaSample)
    assert sample.mem_reserved is not None and sample.mem_total is not None
    assert sample.mem_reserved / sample.mem_total == pytest.approx(0.97, abs=0.001)
    assert sample.alloc_retries == 3 and sample.window is None


def test_steps_frames_carry_gpu_rows_that_the_server_reads() -> None:
    agent = _agent()
    spans = (0.2, 0.15, 0.05, 1)  # forward, backward, optimizer, flags (a training step)
    a_rec = StepRecord("torch-dataloader", 0, 10.0, 10.5, 0.1, 8, 0.05)
    a_rec.set_spans(spans)
    a_rec.gpu_timed, a_rec.gpu_span, a_rec.gpu_busy, a_rec.busy_source = True, 0.4, 0.3, 1
    agent.enqueue(a_rec)
    agent.enqueue(StepRecord("torch-dataloader", 1, 10.5, 11.0, 0.1, 8, 0.05))
    frame = protocol.decode_body(agent._steps_frame()[protocol.HEADER.size :])
    assert frame["gpu"] == [400000, 300000, 1, None, None, 0]
    assert frame["compute"] == [200000, 150000, 50000, 1, None, None, None, 0]
    a, b = convert_frame(frame, 7)
    assert isinstance(a, StepSample) and isinstance(b, StepSample)
    assert (a.gpu_span_s, a.gpu_busy_s, a.gpu_busy_source) == (0.4, 0.3, "profiler")
    assert a.gpu_busy_fraction == pytest.approx(0.6)
    assert (b.gpu_span_s, b.gpu_busy_s, b.gpu_busy_source) == (None, None, None)
    assert (a.forward_s, a.backward_s, a.optimizer_s, a.phase_hint) == (0.2, 0.15, 0.05, "train")
    assert (b.forward_s, b.phase_hint) == (None, "")
    # an agent without CUDA sends no gpu field; the frame reads as before
    agent.enqueue(StepRecord("torch-dataloader", 2, 11.0, 11.5, 0.1, 8, 0.05))
    plain = protocol.decode_body(agent._steps_frame()[protocol.HEADER.size :])
    assert "gpu" not in plain
    (c,) = convert_frame(plain, 7)
    assert isinstance(c, StepSample) and c.gpu_span_s is None


@pytest.mark.parametrize(
    "gpu",
    [[1, 2], [1, 2, 3, 4, 5, 6], [-1, 0, 0], [1, 1, 7], [1.5, 1, 1], "x"],
    ids=["short", "long", "negative", "source", "float", "type"],
)
def test_malformed_gpu_rows_are_protocol_errors(gpu: object) -> None:
    frame = {"type": "steps", "source": "s", "data": [0, 1, 2, 0, None, None], "gpu": gpu}
    with pytest.raises(protocol.FrameError):
        convert_frame(frame, 1)


# -- the trace reader ---------------------------------------------------------------------------


def _k(ts: float, dur: float, name: str = "k", corr: int = 0, dev: int = 0) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"device": dev, "correlation": corr}}  # fmt: skip


def _rt(ts: float, name: str, corr: int, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 1.0, "tid": tid,
            "args": {"correlation": corr}}  # fmt: skip


def _copy(ts: float, dur: float, src: str, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy HtoD ({src} -> Device)", "ts": ts,
            "dur": dur, "args": {"device": 0, "correlation": corr, "bytes": 1 << 20}}  # fmt: skip


def test_busy_is_the_union_of_kernels_on_all_streams() -> None:
    trace = {"traceEvents": [_k(0, 100), _k(50, 100), _k(400, 100), _k(0, 1000, dev=1)]}
    w = window_stats(trace, steps=1, wall_s=0.001, input_wait_s=0.0, device=0)
    assert w["busy_s"] == pytest.approx(250e-6)  # [0, 150] and [400, 500]
    assert w["kernels"] == 3 and w["median_kernel_s"] == pytest.approx(100e-6)
    assert (w["short_gaps"], w["long_gaps"]) == (0, 1)  # the 250 us gap is a long one
    assert w["long_gap_s"] == pytest.approx(250e-6)


def test_short_gaps_are_launch_gaps_and_ts_may_be_strings() -> None:
    gap_us = SHORT_GAP_S * 1e6 / 2
    events = [_k(str(i * (10 + gap_us)), 10) for i in range(10)]  # type: ignore[arg-type]
    w = window_stats({"traceEvents": events}, 1, 0.01, 0.0)
    assert (w["short_gaps"], w["long_gaps"]) == (9, 0)
    assert w["short_gap_s"] == pytest.approx(9 * gap_us / 1e6)


def test_copies_pageable_and_blocking_are_told_apart() -> None:
    events = [
        # pageable, then a stream sync on the same thread: .to(device) without non_blocking
        _rt(0, "cudaMemcpyAsync", 1), _rt(2, "cudaStreamSynchronize", 2),
        _copy(3, 100, "Pageable", 1),
        # pinned and non_blocking: the next call is a kernel launch
        _rt(200, "cudaMemcpyAsync", 3), _rt(201, "cudaLaunchKernel", 4),
        _copy(205, 20, "Pinned", 3), _k(230, 50, corr=4),
        # pinned but blocking (a synchronous cudaMemcpy)
        _rt(400, "cudaMemcpy", 5), _copy(401, 20, "Pinned", 5),
    ]  # fmt: skip
    w = window_stats({"traceEvents": events}, 1, 0.001, 0.0)
    assert (w["h2d_copies"], w["pageable_h2d"], w["blocking_h2d"]) == (3, 1, 2)
    assert w["h2d_s"] == pytest.approx(140e-6) and w["pageable_h2d_s"] == pytest.approx(100e-6)
    assert w["h2d_bytes"] == 3 << 20
    assert (w["launches"], w["syncs"]) == (1, 1)
    assert w["busy_s"] == pytest.approx(50e-6)  # copies are not compute


def test_gpu_time_past_the_window_is_clipped_to_it() -> None:
    w = window_stats({"traceEvents": [_k(0, 3000), _k(4000, 3000)]}, 1, 0.005, 0.0)
    assert w["busy_s"] == pytest.approx(0.005)
    assert w["short_gap_s"] + w["long_gap_s"] <= 1e-9  # no idle time left in the window


def test_kernel_names_say_convolutions_and_half_precision() -> None:
    events = [
        _k(0, 1, "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32"),
        _k(2, 1, "void cudnn::cnn::conv2d_grouped_direct_kernel<float>"),
        _k(4, 1, "ampere_sgemm_128x64_tn"),
    ]
    w = window_stats({"traceEvents": events}, 1, 0.001, 0.0)
    assert (w["conv_kernels"], w["bf16_kernels"]) == (2, 1)


def test_garbage_traces_give_empty_windows() -> None:
    for trace in (None, {}, {"traceEvents": "x"}, [1, "a", {"ph": "X", "cat": "kernel"}]):
        w = window_stats(trace, 0, 0.0, 0.0)
        assert w["kernels"] == 0 and w["busy_s"] == 0.0


# -- the real backend, on this machine's CPU-only torch ----------------------------------------


@pytest.mark.slow
def test_the_real_backend_never_initialises_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    backend = hooks_cuda.TorchCudaBackend()
    agent = _agent()
    _observer(agent, backend)
    loop = _Loop(agent)
    for _ in range(3):
        loop.step()
    assert not backend.ready() and not torch.cuda.is_initialized()
    assert [r.gpu_timed for r in _queued(agent)] == [False] * 3  # passed through untouched


class _SlowExport(FakeCuda):
    """A trace that takes half a second to read (torch.profiler's export of a long window)."""

    def stop_profiler(self) -> Any:
        self.stops = getattr(self, "stops", 0) + 1
        export = super().stop_profiler()

        def slow() -> object:
            time.sleep(0.5)
            return export()

        return slow


def test_at_exit_no_window_is_left_running_and_no_trace_left_being_read() -> None:
    """A window's trace still being read while the interpreter finalized crashed the workload
    (SIGSEGV, a VGG11 loop on an H200): at exit the reading is waited for, and an open window
    is stopped, before the agent's last flush."""
    agent = _agent(cuda_first_window_s=0.0, cuda_window_steps=2, cuda_window_s=3600.0)
    fake = _SlowExport("input", lag=0)
    obs = _observer(agent, fake)
    loop = _Loop(agent)
    deadline = time.monotonic() + 30
    while obs._finishing is None and time.monotonic() < deadline:
        loop.step()
    reading = obs._finishing
    assert reading is not None and reading.is_alive()  # the trace is being read
    obs.at_exit()
    assert not reading.is_alive()
    assert [f["window"]["steps"] for f in _frames(agent, "cuda") if f["window"]] == [2]

    agent = _agent(cuda_first_window_s=0.0, cuda_window_steps=1000, cuda_window_s=3600.0)
    fake = _SlowExport("input", lag=0)
    obs = _observer(agent, fake)
    loop = _Loop(agent)
    while obs._window is None and time.monotonic() < deadline:
        loop.step()
    assert obs._window is not None  # a window is open as the workload exits
    obs.at_exit()
    assert obs._window is None and fake.stops == 1 and fake._window is None
