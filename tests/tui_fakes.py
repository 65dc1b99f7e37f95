"""A scripted ``SnapshotSource`` and builders of realistic, deterministic snapshots (TUI tests)."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from sofa_top.analysis.load import machine_load
from sofa_top.analysis.verdicts import Evidence, judge
from sofa_top.collectors.gpu import GpuCollector, RecordedNvmlBackend
from sofa_top.datamodel.evidence_json import parse_evidence
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    CudaWindow,
    Event,
    GpuDevice,
    GpuSample,
    PipelineSample,
    PipelineStage,
    ProcessSample,
    ProcInfo,
    StackClass,
    StackWindow,
    StepSample,
    SystemSample,
)
from sofa_top.datamodel.snapshot import (
    FunctionStat,
    Point,
    Snapshot,
    StackSummary,
    TargetInfo,
    ThreadStat,
)
from sofa_top.datamodel.source import OnSnapshot
from sofa_top.datamodel.verdict import Recommendation, Verdict
from sofa_top.datamodel.verdict_evidence import ProcessEvidence

T0 = 1_700_000_000.0  # session start (a fixed instant keeps SVG snapshots stable)
SESSION_PATH = "/home/ml/.local/share/sofa-top/sessions/2023-11-14T22-13-20-pid4242.sofa"
TARGET_PID = 4242
MAIN_TID = 4242
PIN_TID = 4301
CMDLINE = (
    "python",
    "train.py",
    "--epochs",
    "10",
    "--batch-size",
    "256",
    "--data",
    "/datasets/imagenet",
)
GIB = 1024**3
MIB = 1024**2

BUSY_FUNCTION = "decode_jpeg"


class FakeSource:
    """Implements ``SnapshotSource``; the test decides when each snapshot arrives.

    ``push()`` calls the dashboard's callback from a separate thread, exactly like the session
    hub does, so the test exercises the same ``post_message`` path as production.
    """

    def __init__(self, snapshots: Iterable[Snapshot] = (), *, session_path: str = SESSION_PATH):
        self.session_path = session_path
        self.script: deque[Snapshot] = deque(snapshots)
        self.callback: OnSnapshot | None = None
        self.start_calls = 0
        self.stop_calls = 0
        self.stop_threads: list[int] = []  # thread idents stop() ran on

    def start(self, on_snapshot: OnSnapshot) -> None:
        self.start_calls += 1
        self.callback = on_snapshot

    def stop(self) -> None:
        self.stop_calls += 1
        self.stop_threads.append(threading.get_ident())

    def push(self, snapshot: Snapshot | None = None) -> Snapshot:
        """Deliver ``snapshot`` (default: the next scripted one) from a background thread."""
        if self.callback is None:
            raise RuntimeError("push() before the dashboard called start()")
        snap = snapshot if snapshot is not None else self.script.popleft()
        thread = threading.Thread(target=self.callback, args=(snap,), name="fake-source")
        thread.start()
        thread.join()
        return snap


class LaunchSource(FakeSource):
    """A launch-mode source (``launch.Run``'s shape): it can also detach, leaving the workload
    running, and be ended by a signal."""

    def __init__(self, snapshots: Iterable[Snapshot] = (), **kw: str) -> None:
        super().__init__(snapshots, **kw)
        self.detach_calls = 0
        self.signals: list[str] = []

    def detach(self) -> None:
        self.detach_calls += 1

    def signalled(self, name: str) -> None:
        self.signals.append(name)


# -- builders -----------------------------------------------------------------------------------


def _wave(t: float, period: float, phase: float = 0.0) -> float:
    """0..1, smooth and deterministic."""
    return 0.5 + 0.5 * math.sin(2 * math.pi * (t / period) + phase)


def series(
    start: float, end: float, fn: Callable[[float], float], *, gaps: Iterable[float] = ()
) -> tuple[Point, ...]:
    """Per-second points ``fn(t)`` from ``start`` to ``end`` (inclusive); ``gaps`` read None."""
    missing = set(gaps)
    points: list[Point] = []
    t = start
    while t <= end + 1e-9:
        points.append((t, None if t in missing else fn(t)))
        t += 1.0
    return tuple(points)


def history(
    now: float, *, started: float = T0, cpu_count: int = 8, gpus: int = 0
) -> dict[str, tuple[Point, ...]]:
    """All series the hub produces, from ``started`` to ``now``."""
    h: dict[str, tuple[Point, ...]] = {
        # An input-bound job: CPU swings with the data loader, never saturating 8 cores.
        "tree.cpu": series(started, now, lambda t: 180 + 220 * _wave(t, 23)),
        "tree.rss": series(started, now, lambda t: 2.1 * GIB + min(t - started, 90) * 6 * MIB),
        "tree.read_rate": series(started, now, lambda t: 40 * MIB * _wave(t, 11, 1.0)),
        "tree.write_rate": series(started, now, lambda t: 2 * MIB * _wave(t, 31, 2.0)),
        "tree.threads": series(started, now, lambda t: 57),
        "sys.cpu": series(started, now, lambda t: 35 + 25 * _wave(t, 23)),
        "sys.iowait": series(started, now, lambda t: 4 * _wave(t, 11)),
        "sys.mem_used": series(started, now, lambda t: 21 * GIB + min(t - started, 90) * 6 * MIB),
    }
    for i in range(cpu_count):
        h[f"sys.cpu.{i}"] = series(started, now, _scaled(0, 100, 13 + i, i))
    for g in range(gpus):
        h[f"gpu.{g}.util"] = series(started, now, _scaled(30, 60, 17, g))
        h[f"gpu.{g}.mem_used"] = series(started, now, _scaled(31 * GIB, 2 * GIB, 40, 0))
        h[f"gpu.{g}.power"] = series(started, now, _scaled(180, 240, 17, g))
    return h


def _scaled(base: float, swing: float, period: float, phase: float) -> Callable[[float], float]:
    """``base + swing * wave``, bound now (a lambda in a loop would see the last phase)."""
    return lambda t: base + swing * _wave(t, period, phase)


def processes(now: float, *, cpu: float = 312.0, worker_exited: bool = True) -> ProcessSample:
    """The target, three DataLoader workers (one exited) and a pin-memory helper."""
    procs = [
        ProcInfo(TARGET_PID, 1, "python", CMDLINE, T0, cpu, 41, int(3.2 * GIB), 0, 0, 0,
                 "running", role="target"),
        ProcInfo(4250, TARGET_PID, "python", CMDLINE, T0 + 2, 96.0, 4, int(0.9 * GIB), 0, 0, 0,
                 "running", role="DataLoader worker"),
        ProcInfo(4251, TARGET_PID, "python", CMDLINE, T0 + 2, 88.5, 4, int(0.9 * GIB), 0, 0, 0,
                 "sleeping", role="DataLoader worker"),
        ProcInfo(4252, TARGET_PID, "python", CMDLINE, T0 + 2, 0.0, 4, int(0.8 * GIB), 0, 0, 0,
                 "exited" if worker_exited else "running", alive=not worker_exited,
                 role="DataLoader worker"),
        ProcInfo(4260, 4250, "nvidia-smi", ("nvidia-smi",), T0 + 5, 1.5, 1, 12 * MIB, 0, 0, 0,
                 "sleeping", role="child"),
    ]  # fmt: skip
    return ProcessSample(
        ts=now,
        target_pid=TARGET_PID,
        target_alive=True,
        procs=tuple(procs),
        tree_cpu_percent=cpu,
        tree_rss=sum(p.rss or 0 for p in procs if p.alive),
        tree_read_bytes=12 * GIB,
        tree_write_bytes=300 * MIB,
        tree_threads=sum(p.num_threads or 0 for p in procs if p.alive),
    )


def system(now: float, cpu_count: int = 8) -> SystemSample:
    """Eight busy-ish cores, 64 GiB of memory."""
    per_core = tuple(round(100 * _wave(now, 13 + i, i), 1) for i in range(cpu_count))
    return SystemSample(
        ts=now,
        cpu_per_core=per_core,
        cpu_total=round(sum(per_core) / cpu_count, 1),
        iowait=3.0,
        mem_used=int(21.5 * GIB),
        mem_total=64 * GIB,
        swap_used=0,
        swap_total=8 * GIB,
    )


def no_gpu(now: float) -> GpuSample:
    """What the GPU collector reports on a machine without an NVIDIA driver."""
    return GpuSample(ts=now, status="no-gpu", message="no NVIDIA GPU: NVML library not found")


def recorded_gpu(now: float, count: int = 1) -> GpuSample:
    """``count`` H100s half busy."""
    devices = tuple(
        GpuDevice(
            index=i,
            name="NVIDIA H100 80GB HBM3",
            util=87.0,
            mem_used=int(31.4 * GIB),
            mem_total=80 * GIB,
            power_w=402.0,
            temp_c=61.0,
            sm_clock_mhz=1980.0,
            target_mem=int(30.9 * GIB),
        )
        for i in range(count)
    )
    return GpuSample(ts=now, status="ok", devices=devices, driver="550.54.15")


_FUNCTIONS: tuple[tuple[str, str, int, float, float, str, StackClass], ...] = (
    (BUSY_FUNCTION, "/work/data/augment.py", 41, 31.5, 33.0, "MainThread", "input"),
    ("next_batch", "/work/data/pipeline.py", 88, 12.2, 58.4, "MainThread", "input"),
    ("conv2d_forward", "/work/models/resnet.py", 120, 14.0, 21.7, "MainThread", "compute"),
    ("optimizer_step", "/work/train.py", 201, 8.1, 9.0, "MainThread", "compute"),
    ("pin_memory", "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py",
     64, 6.3, 7.9, "pin_memory", "python"),
    ("collate", "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py",
     140, 4.4, 6.0, "MainThread", "python"),
    ("wait", "/usr/lib/python3.11/threading.py", 331, 11.0, 11.0, "pin_memory", "idle"),
    ("log_metrics", "/work/train.py", 230, 0.9, 1.2, "MainThread", "python"),
)  # fmt: skip


def functions(thread: str | None = None) -> tuple[FunctionStat, ...]:
    """Hot functions (all threads, or one thread name), sorted by own % like the hub does."""
    stats = [
        FunctionStat(fn, path, line, own, total, th, klass)
        for fn, path, line, own, total, th, klass in _FUNCTIONS
        if thread is None or th == thread
    ]
    return tuple(sorted(stats, key=lambda f: -f.own_pct))


def _split(stats: Iterable[FunctionStat]) -> Mapping[str, float]:
    totals: dict[str, float] = {"input": 0.0, "compute": 0.0, "python": 0.0, "idle": 0.0}
    for stat in stats:
        totals[stat.klass] += stat.own_pct
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def stacks(now: float) -> tuple[StackSummary, dict[int, StackSummary]]:
    """The all-threads summary and one per thread (main thread and pin-memory thread)."""
    threads = (
        ThreadStat(TARGET_PID, MAIN_TID, "MainThread", 410, _split(functions("MainThread"))),
        ThreadStat(TARGET_PID, PIN_TID, "pin_memory", 90, _split(functions("pin_memory"))),
    )

    def summary(fns: tuple[FunctionStat, ...], samples: int) -> StackSummary:
        return StackSummary(
            ts_start=now - 5,
            ts_end=now,
            thread_samples=samples,
            functions=fns,
            split=_split(fns),
            threads=threads,
            rate_hz=100.0,
            sampler_cpu=2.4,
        )

    by_thread = {
        MAIN_TID: summary(functions("MainThread"), 410),
        PIN_TID: summary(functions("pin_memory"), 90),
    }
    return summary(functions(), 500), by_thread


def make_snapshot(
    now: float = T0 + 75,
    *,
    gpus: int = 0,
    cpu: float = 312.0,
    stack_error: str | None = None,
    stack_hint: str | None = None,
    target_exited: bool = False,
    exit_code: int | None = None,
    cpu_count: int = 8,
    session_path: str = SESSION_PATH,
    verdict: Verdict | None = None,
    steps: tuple[StepSample, ...] = (),
    pipeline: PipelineSample | None = None,
    agent: AgentInfo | None = None,
    logs: tuple[Event, ...] = (),
    logs_dropped: int = 0,
    launched: bool = False,
) -> Snapshot:
    """A realistic snapshot of an input-bound training job ``now - T0`` seconds in."""
    all_stacks: StackSummary | None = None
    by_thread: dict[int, StackSummary] = {}
    if stack_error is not None:
        window = StackWindow(now - 1, now, 0.0, 0, error=stack_error, hint=stack_hint)
    else:
        all_stacks, by_thread = stacks(now)
        window = StackWindow(now - 1, now, 100.0, 100, sampler_cpu=2.4)
    snapshot = Snapshot(
        ts=now,
        started=T0,
        target=TargetInfo(TARGET_PID, "python", CMDLINE, launched=launched),
        session_path=session_path,
        recording=True,
        history=history(now, cpu_count=cpu_count, gpus=gpus),
        process=processes(now, cpu=cpu),
        system=system(now, cpu_count),
        gpu=recorded_gpu(now, gpus) if gpus else no_gpu(now),
        stacks=all_stacks,
        stacks_by_thread=by_thread,
        last_stack_window=window,
        target_exited=target_exited,
        exit_code=exit_code,
        cpu_count=cpu_count,
        verdict=verdict,
        steps=steps,
        pipeline=pipeline,
        agent=agent,
        logs=logs,
        logs_dropped=logs_dropped,
    )
    return dataclasses.replace(snapshot, verdict=as_judged(verdict, snapshot))


def as_judged(verdict: Verdict | None, snapshot: Snapshot) -> Verdict | None:
    """``verdict`` with the load the hub's judge reads from the same snapshot, where it has
    none of its own (a verdict made here, or judged from steps alone)."""
    ev = verdict.evidence if verdict is not None else None
    if verdict is None or not isinstance(ev, ProcessEvidence):
        return verdict
    tree = snapshot.process.tree_cpu_percent if snapshot.process is not None else None
    seen = machine_load(tree, snapshot.cpu_count, snapshot.gpu, None)
    mine = ev.load or seen
    load = dataclasses.replace(
        mine,
        cpu_saturation=seen.cpu_saturation if mine.cpu_saturation is None else mine.cpu_saturation,
        gpu_util_percent=seen.gpu_util_percent
        if mine.gpu_util_percent is None
        else mine.gpu_util_percent,
    )
    return dataclasses.replace(verdict, evidence=dataclasses.replace(ev, load=load))


# -- launch mode: verdict, steps, pipeline, agent, output ---------------------------------------

STEP_S = 0.25  # every step takes 250 ms ...
WAIT_S = 0.15  # ... of which 150 ms wait for input: 60% input-bound
BATCH = 256
BOTTLENECK_STAGE = "ParallelMapDatasetV2"
FIRST_REC = "map: num_parallel_calls=tf.data.AUTOTUNE (stage ParallelMapDatasetV2 runs serially)"


def make_steps(
    now: float = T0 + 75,
    count: int = 120,
    *,
    step_s: float = STEP_S,
    wait_s: float = WAIT_S,
    batch_size: int | None = BATCH,
) -> tuple[StepSample, ...]:
    """``count`` steps ending at ``now``; every 7th waits twice as long (a visible pattern)."""
    out: list[StepSample] = []
    end = now
    durations = []
    for k in range(count):
        extra = wait_s if k % 7 == 3 else 0.0
        durations.append((step_s + extra, wait_s + extra))
    for k in range(count - 1, -1, -1):
        duration, wait = durations[k]
        out.append(
            StepSample(
                ts=end,
                step=1000 + k,
                start=end - duration,
                duration_s=duration,
                input_wait_s=wait,
                source="tf-eager",
                batch_size=batch_size,
                pid=TARGET_PID,
            )
        )
        end -= duration
    return tuple(reversed(out))


def input_bound_verdict(severity: str = "high") -> Verdict:
    """What ``verdicts.judge`` says of the steps above with a serial tf.data map."""
    return Verdict(
        kind="input-bound",
        confidence=0.95 if severity == "high" else 0.76,
        headline=f"input-bound: 60% of each step waits for input in stage {BOTTLENECK_STAGE}",
        evidence=parse_evidence(
            "input-bound",
            {
                "cpu_saturation": 0.39,
                "gpu_util_percent": None,
                "input_fraction": 0.6,
                "steps": 40,
                "median_step_s": STEP_S,
                "bottleneck_stage": BOTTLENECK_STAGE,
            },
        ),
        recommendations=(
            Recommendation(FIRST_REC, "prefetch"),
            Recommendation("add .prefetch(tf.data.AUTOTUNE) after batch()", "prefetch"),
        ),
        severity=severity,
    )


def compute_bound_verdict() -> Verdict:
    """A healthy job: the GPU is the limit."""
    return Verdict(
        kind="compute-bound",
        confidence=0.9,
        headline="compute-bound: only 2% of each step waits for input",
        evidence=parse_evidence(
            "compute-bound",
            {"cpu_saturation": 0.12, "gpu_util_percent": 97.0, "input_fraction": 0.02},
        ),
        recommendations=(
            Recommendation(
                "compile the step with XLA: model.compile(jit_compile=True) or "
                "@tf.function(jit_compile=True)",
                "xla",
            ),
        ),
    )


def make_pipeline(now: float = T0 + 75) -> PipelineSample:
    """A tf.data pipeline whose serial map is the bottleneck (no prefetch)."""
    return PipelineSample(
        ts=now,
        framework="tf.data",
        stages=(
            PipelineStage("BatchDatasetV2", "batch", None, 256, 0.00021),
            PipelineStage(BOTTLENECK_STAGE, "map", 1, None, 0.00058, is_bottleneck=True),
            PipelineStage("ShuffleDataset", "other", None, 10000, 0.000004),
            PipelineStage("TensorSliceDataset", "source", None, None, 0.000001),
        ),
        pid=TARGET_PID,
        note="runtime (tf.data model, 30720 elements produced); slowest stage: "
        "ParallelMapDatasetV2 (the most time per element produced)",
    )


def make_agent(now: float = T0 + 75) -> AgentInfo:
    """TensorFlow hooked; Keras fit not (this script never calls fit)."""
    return AgentInfo(
        ts=now,
        pid=TARGET_PID,
        python="3.11.9",
        frameworks=(("tensorflow", "2.21.0"),),
        hooks_applied=("tf-eager", "tf-data-pipeline"),
        hooks_skipped=(("keras-fit", "keras not imported"),),
    )


def make_logs(count: int = 30, *, now: float = T0 + 75, stderr_every: int = 5) -> tuple[Event, ...]:
    """``count`` output lines, every ``stderr_every``-th on stderr."""
    out = []
    for i in range(count):
        stream = "stderr" if stderr_every and i % stderr_every == stderr_every - 1 else "stdout"
        text = (
            f"W0000 warning {i}: [slow] op" if stream == "stderr" else f"step {i}: loss=0.{i:03d}"
        )
        out.append(Event(now - count + i, "log", text, {"stream": stream}))
    return tuple(out)


def launch_snapshot(now: float = T0 + 75, **kw: object) -> Snapshot:
    """A launched, input-bound tf.data job with everything the agent reports."""
    defaults: dict[str, object] = {
        "verdict": input_bound_verdict(),
        "steps": make_steps(now),
        "pipeline": make_pipeline(now),
        "agent": make_agent(now),
        "logs": make_logs(now=now),
        "launched": True,
    }
    defaults.update(kw)
    return make_snapshot(now, **defaults)  # type: ignore[arg-type]


PTRACE_ERROR = "ptrace denied: Operation not permitted (os error 1)"
PTRACE_HINT = (
    "run sofa-top as root, or allow ptrace: sudo sysctl kernel.yama.ptrace_scope=0 "
    "(in a container: --cap-add SYS_PTRACE)"
)


# -- a CUDA loop (launch-bound), GPU readings from recorded NVML --------------------------------

NVML_DATA = Path(__file__).parent / "data" / "nvml"
GPU_STEP_S = 0.012
H200 = "NVIDIA H200"


def nvml_gpu(now: float, recording: str, frame: int = 0, tree: set[int] | None = None) -> GpuSample:
    """The real GpuCollector's reading of frame ``frame`` of a recorded NVML backend
    (tests/data/nvml: hand-made recordings, NO GPU), stamped ``now``."""
    collector = GpuCollector(
        lambda: tree or {TARGET_PID}, backend=RecordedNvmlBackend(NVML_DATA / recording)
    )
    assert collector.open() is None
    try:
        samples = [collector.sample() for _ in range(frame + 1)]
    finally:
        collector.close()
    return dataclasses.replace(samples[-1], ts=now)


def gpu_steps(now: float = T0 + 75, count: int = 150) -> tuple[StepSample, ...]:
    """A launch-bound CUDA loop: 12 ms steps, GPU busy 2-3 ms of each (every 9th step is one
    of the agent's profiler window: measured; the others estimated)."""
    out: list[StepSample] = []
    end = now
    for k in range(count - 1, -1, -1):
        busy = 0.0026 + 0.0004 * math.sin(k / 5)
        out.append(
            StepSample(
                ts=end,
                step=4000 + k,
                start=end - GPU_STEP_S,
                duration_s=GPU_STEP_S,
                input_wait_s=0.0003,
                source="torch-dataloader",
                batch_size=16,
                pid=TARGET_PID,
                gpu_span_s=GPU_STEP_S,
                gpu_busy_s=busy,
                gpu_busy_source="profiler" if k % 9 == 0 else "estimate",
            )
        )
        end -= GPU_STEP_S
    return tuple(reversed(out))


def launch_window() -> CudaWindow:
    """A profiler window of five launch-bound steps (as cuda_trace.window_stats reads one)."""
    return CudaWindow(
        steps=5, wall_s=0.060, busy_s=0.013, input_wait_s=0.0015, kernels=4500, kernel_s=0.013,
        median_kernel_s=2.6e-6, short_gaps=4495, short_gap_s=0.040, long_gaps=5,
        long_gap_s=0.0065, h2d_copies=10, h2d_s=0.0001, h2d_bytes=5 * 16 * 33 * 4,
        pageable_h2d=10, pageable_h2d_s=0.0001, blocking_h2d=10, d2h_copies=5, d2h_s=0.00002,
        launches=4500, syncs=15, conv_kernels=0, bf16_kernels=0,
    )  # fmt: skip


def cuda_sample(now: float = T0 + 75) -> CudaSample:
    """The agent's CUDA reading of that loop: H200, 8.6 GiB reserved."""
    return CudaSample(
        ts=now, pid=TARGET_PID, device=0, device_name=H200, bf16_supported=True,
        capability="9.0", mem_allocated=6 * GIB, mem_reserved=int(8.6 * GIB),
        mem_total=int(139.8 * GIB), mem_free=int(130 * GIB), alloc_retries=0, ooms=0,
        window=launch_window(),
    )  # fmt: skip


def gpu_loop_agent(now: float = T0 + 75) -> AgentInfo:
    """PyTorch on CUDA, every torch hook applied."""
    return dataclasses.replace(
        make_agent(now),
        python="3.12.3",
        frameworks=(("torch", "2.11.0+cu130"),),
        hooks_applied=("torch-dataloader", "torch-optimizer", "torch-cuda"),
        hooks_skipped=(),
    )


def gpu_loop_snapshot(now: float = T0 + 75, **kw: object) -> Snapshot:
    """A launched, launch-bound CUDA loop: the verdict is what ``verdicts.judge`` says of it."""
    steps = gpu_steps(now)
    gpu = nvml_gpu(now, "h200_gpu_loop.json", frame=2)
    cuda = cuda_sample(now)
    pipeline = PipelineSample(
        ts=now, framework="torch", pid=TARGET_PID,
        stages=(PipelineStage("TensorDataset", "source", 1, None, None, True),
                PipelineStage("BatchSampler", "batch", None, 16, None)),
        note="DataLoader num_workers=0, batch_size=16; batches are loaded on the training "
        "loop's thread",
    )  # fmt: skip
    verdict = judge(
        Evidence(
            steps=steps[-80:], tree_cpu=99.0, cpu_count=16, gpu=gpu, pipeline=pipeline,
            frameworks=("torch",), cuda=[cuda],
        )
    )  # fmt: skip
    defaults: dict[str, object] = {
        "verdict": verdict,
        "steps": steps,
        "pipeline": pipeline,
        "agent": gpu_loop_agent(now),
        "logs": make_logs(now=now),
        "launched": True,
        "cpu_count": 16,
    }
    defaults.update(kw)
    snapshot = make_snapshot(now, **defaults)  # type: ignore[arg-type]
    history = dict(snapshot.history)
    history["gpu.0.util"] = series(T0, now, _scaled(36, 6, 17, 0))
    history["gpu.0.mem_used"] = series(T0, now, lambda t: 9311 * MIB)
    history["gpu.0.power"] = series(T0, now, _scaled(215, 20, 11, 1))
    return dataclasses.replace(snapshot, gpu=gpu, cuda=cuda, history=history)


# -- a training loop with its evaluation pass, steps from the model-call clock ------------------


def phases_snapshot(now: float = T0 + 75) -> Snapshot:
    """A torch training loop that preprocesses in its body, with an evaluation pass every 20
    steps: the model-call clock's steps, each phase apart, and their compute split."""
    steps: list[StepSample] = []
    t = now - 40.0
    for k in range(140):
        evaluating = k % 30 >= 20
        duration = 0.060 if evaluating else 0.110
        host = 0.045 if evaluating else 0.060
        compute = duration - host
        steps.append(
            StepSample(
                ts=t + duration,
                step=k,
                start=t,
                duration_s=duration,
                input_wait_s=host,
                source="torch-model-call",
                batch_size=16,
                forward_s=compute if evaluating else compute * 0.35,
                backward_s=0.0 if evaluating else compute * 0.5,
                optimizer_s=0.0 if evaluating else compute * 0.15,
                phase_hint="eval" if evaluating else "train",
                autograd=not evaluating,
            )
        )
        t += duration
    verdict = judge(Evidence(steps=steps[-60:], cpu_count=2, training=True))
    return make_snapshot(now, verdict=verdict, steps=tuple(steps), launched=True)
