"""Immutable samples: the only thing collectors hand to the rest of sofa-top.

Every sample carries its timestamp, and a failed reading carries its error as data
(``error`` is a short human-readable string) instead of raising. Missing hardware or
permission is a *state* (e.g. ``GpuSample.status == "no-gpu"``), not an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from sofa_top.agent.clocks import Clock
from sofa_top.datamodel.literals import one_of
from sofa_top.datamodel.neighbours import Neighbour as Neighbour  # re-exported: a sample's
from sofa_top.datamodel.ranks import RankId
from sofa_top.datamodel.units import Bytes, Celsius, Hertz, MHz, Percent, Pid, Timestamp, Watts

StackClass = Literal["input", "compute", "python", "idle"]
STACK_CLASSES: tuple[StackClass, ...] = ("input", "compute", "python", "idle")


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process of the target tree at one instant."""

    pid: Pid
    ppid: Pid
    name: str
    cmdline: tuple[str, ...]
    create_time: Timestamp
    cpu_percent: Percent | None  # None on the first reading of a process (no delta yet)
    num_threads: int | None
    rss: Bytes | None
    read_bytes: Bytes | None
    write_bytes: Bytes | None
    ctx_switches: int | None  # voluntary + involuntary, cumulative
    state: str  # psutil status, e.g. "running", "sleeping", "zombie"; "exited" once gone
    alive: bool = True
    role: str | None = None  # e.g. "target", "child", "DataLoader worker", "rank 2"
    error: str | None = None
    # the process's place in a distributed job (from its environment); a DataLoader worker
    # carries its rank's, so the tree groups by rank
    rank: RankId | None = None
    exit_code: int | None = None  # once exited, when it could be read (a zombie's /proc stat)


ThreadGroup = Literal["loop", "threads", "workers", "tree"]


@dataclass(frozen=True, slots=True)
class ThreadTimes:
    """What a group of threads did between two readings of the scheduler's accounting
    (``/proc/PID/task/TID/schedstat``), in cores: seconds per second of wall time. Whatever a
    thread spent neither on a CPU nor waiting for one, it slept or was blocked (I/O, a lock, a
    queue)."""

    on_cpu: float  # time on a CPU
    cpu_wait: float  # time runnable but waiting for a CPU (run-queue delay)
    threads: int  # threads of the group at the reading
    io_blocked: int = 0  # of them in uninterruptible sleep (state D: disk I/O, mostly)
    procs: int = 0  # processes they belong to


@dataclass(frozen=True, slots=True)
class TreeSched:
    """The scheduler's accounting of the tree's threads over ``span_s`` seconds, by group:
    ``loop`` the target's main thread (the training loop, in nearly every program), ``threads``
    the target's other threads (tf.data's, the framework's pools), ``workers`` the threads of its
    input worker processes (DataLoader, multiprocessing workers), ``tree`` all of them."""

    span_s: float
    groups: tuple[tuple[ThreadGroup, ThreadTimes], ...] = ()
    error: str | None = None  # why it could not be read (no schedstat in this kernel, ...)

    def group(self, name: ThreadGroup) -> ThreadTimes | None:
        """The times of one group (None when the tree has no such thread)."""
        return next((t for g, t in self.groups if g == name), None)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """The target and all its descendants, plus tree totals."""

    ts: Timestamp
    target_pid: Pid
    target_alive: bool
    procs: tuple[ProcInfo, ...]
    tree_cpu_percent: Percent | None
    tree_rss: Bytes | None
    tree_read_bytes: Bytes | None  # cumulative over live processes
    tree_write_bytes: Bytes | None
    tree_threads: int | None
    exit_code: int | None = None  # known only when sofa-top is the parent
    error: str | None = None
    # threads of the tree in the running or runnable state (R) at the last count: more than the
    # cores the tree gets means threads wait for a core (spinning thread pools)
    tree_runnable: int | None = None
    cores: int | None = None  # cores the target may use: its affinity, capped by a cgroup quota
    # what the tree's threads did since the last such reading (taken with ``tree_runnable``)
    sched: TreeSched | None = None


@dataclass(frozen=True, slots=True)
class SystemSample:
    """Machine-wide CPU, memory and swap."""

    ts: Timestamp
    cpu_per_core: tuple[Percent, ...]
    cpu_total: Percent  # mean over cores, 0..100
    iowait: Percent | None  # None where the OS has no iowait
    mem_used: Bytes
    mem_total: Bytes
    swap_used: Bytes
    swap_total: Bytes
    error: str | None = None


GpuStatus = Literal["ok", "no-gpu", "no-driver", "error"]
# How the target tree's GPU share was found: "pids" (NVML's process ids are the tree's),
# "device" (NVML's ids are not of this PID namespace, e.g. a container: the device totals stand
# in for the target); None where not known
TargetScope = Literal["pids", "device"]


# NVML's clock event ("throttle") reasons: (bit, name); nvmlClocksEventReason* constants
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu-idle"),
    (0x2, "app-clocks"),
    (0x4, "sw-power-cap"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal"),
    (0x40, "hw-thermal"),
    (0x80, "hw-power-brake"),
    (0x100, "display-clocks"),
)


def throttle_names(mask: int) -> tuple[str, ...]:
    """The reasons set in an NVML clock-event bitmask, in bit order."""
    return tuple(name for bit, name in THROTTLE_REASONS if mask & bit)


def throttle_mask(names: tuple[str, ...]) -> int:
    """The inverse of ``throttle_names``."""
    return sum(bit for bit, name in THROTTLE_REASONS if name in names)


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance (GPU slice) of a device in MIG mode."""

    index: int
    name: str
    mem_used: Bytes | None
    mem_total: Bytes | None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU; a field that could not be read is None and its reason is in ``errors``."""

    index: int
    name: str
    util: Percent | None
    mem_used: Bytes | None
    mem_total: Bytes | None
    power_w: Watts | None
    temp_c: Celsius | None
    sm_clock_mhz: MHz | None
    target_mem: Bytes | None  # GPU memory used by processes of the target tree
    errors: tuple[tuple[str, str], ...] = ()  # (field, reason)
    # -- since GPU loops (issue 15): all optional, older readings have them None
    target_util: Percent | None = None  # SM utilisation of the target tree's processes
    target_scope: TargetScope | None = None
    power_limit_w: Watts | None = None
    mem_clock_mhz: MHz | None = None
    sm_clock_max_mhz: MHz | None = None
    # why the clocks are held down (NVML clock event reasons: "sw-power-cap", "hw-slowdown",
    # "sw-thermal", ...); () when nothing throttles, None when unknown
    throttle: tuple[str, ...] | None = None
    mig: bool | None = None  # MIG mode on (None: not supported / unknown)
    mig_instances: tuple[MigInstance, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSample:
    ts: Timestamp
    status: GpuStatus
    devices: tuple[GpuDevice, ...] = ()
    message: str = ""  # e.g. "no NVIDIA GPU: NVML library not found"
    driver: str = ""


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    filename: str
    line: int


@dataclass(frozen=True, slots=True)
class StackCount:
    """How many samples of one window saw one thread in one stack (frames outermost first)."""

    pid: Pid
    tid: int
    thread_name: str
    frames: tuple[Frame, ...]
    count: int
    klass: StackClass


@dataclass(frozen=True, slots=True)
class StackWindow:
    """py-spy samples aggregated over one window (about a second)."""

    ts_start: Timestamp
    ts_end: Timestamp
    rate_hz: Hertz  # sampling rate used in this window (adapts to the CPU budget)
    samples: int  # number of sampling instants (not thread-samples)
    stacks: tuple[StackCount, ...] = ()
    sampler_cpu: Percent | None = None  # py-spy's own CPU use during the window
    error: str | None = None  # e.g. "ptrace denied: ..." (the window then has no stacks)
    hint: str | None = None  # how to fix the error, when there is a fix

    @property
    def ts(self) -> Timestamp:
        """The window's timestamp is its end (when its data became known)."""
        return self.ts_end


EventKind = Literal[
    "log",  # one line of the launched workload's output (data: stream)
    "log-progress",  # the current text of an output line still being rewritten with \r
    "log-dropped",  # output lines not kept (data: dropped)
    "log-error",  # the output could not be read
    "target-exit",  # the target exited (data: exit_code when known)
    "verdict",  # the verdict changed (data: Verdict.as_json())
    "collector-failed",  # a collector thread died (its reason)
    "ui-error",  # a snapshot could not be delivered to the UI
    "agent-connected",  # an agent said hello (data: pid, ppid, argv, settings)
    "agent-exit",  # an agent said bye (data: dropped)
    "agent-error",  # the agent or its connection failed
    "agent-refused",  # a peer was refused (wrong uid, unreadable credentials)
    "agent-disconnected",  # an agent's connection closed without a bye
    "agent-protocol-error",  # an agent sent a malformed frame: that peer is dropped
    "agent-unknown-frame",  # a frame type this version does not know
    "agent-workers",  # DataLoader worker pids (data: workers)
    "agent-pipeline",  # the agent could not read the tf.data runtime model
    "agent-model",  # what the agent found in the model and thread pools (data: ModelReport)
    "optimize",  # an optimizer toggle changed something, or could not (data: toggle, ...)
    "cuda-error",  # the agent's CUDA readings stopped (a CUDA error, the GPU lost): why
    # how the store keeps the agent's reports: read back as events of these kinds
    "agent",  # an AgentInfo (data: its fields)
    "pipeline",  # a PipelineSample (data: its fields)
    # ranks of a distributed job
    "rank",  # a process is a rank (data: pid, RankId.as_json())
    "rank-exit",  # a rank's process exited (data: pid, rank, exit_code, error)
    "rank-verdict",  # the cross-rank verdict changed (data: Verdict.as_json())
    "cuda",  # a CudaSample (data: its fields)
    # the processes outside the tree that keep the cores busy (data: others_cores, top: the
    # three busiest as [{pid, name, cores}]), when they change
    "neighbours",
    # what a comparison measured, carried into the session and its verdict (data:
    # ``datamodel.verdict.Measured.as_json()``)
    "measured",
]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)


def event_kind(value: object) -> EventKind | None:
    """``value`` as an event kind, or None when this version does not know it."""
    return one_of(value, EVENT_KINDS)


@dataclass(frozen=True, slots=True)
class Event:
    """A marker in the session: target exit, verdict change, collector state change, ..."""

    ts: Timestamp
    kind: EventKind
    message: str
    data: dict[str, object] = field(default_factory=dict)


PhaseHint = Literal["train", "eval", ""]


_PHASE_HINTS: tuple[PhaseHint, ...] = get_args(PhaseHint)


def phase_hint(value: object) -> PhaseHint:
    """``value`` as a phase hint ("" for anything else)."""
    return one_of(value, _PHASE_HINTS) or ""


@dataclass(frozen=True, slots=True)
class StepSample:
    """One training step as the in-process agent measured it (launch mode)."""

    ts: Timestamp  # step end
    step: int
    start: Timestamp
    duration_s: float  # step time: end of previous step (or first fetch) to end of this one
    input_wait_s: float  # time the loop waited for the next batch within this step
    source: Clock  # the clock that marked it (``agent.clocks.TABLE``)
    batch_size: int | None = None
    pid: Pid = 0
    # CPU seconds the process used (all its threads) while the loop waited: input work done in
    # the process (tf.data's threads, a DataLoader without workers); None when not measured
    wait_cpu_s: float | None = None
    # time the step spent blocked in collectives (all-reduce, broadcast, barrier: waiting for
    # the other ranks); None when not measured (no torch.distributed)
    collective_s: float | None = None
    # CUDA (agent, hooks_cuda): the GPU time between CUDA events recorded on the current stream
    # at the step's two boundaries. A span, not busy time: it includes the GPU's idle gaps
    gpu_span_s: float | None = None
    # time the GPU ran kernels for this step: measured in a profiler window ("profiler"), else
    # the last window's busy time per step capped by the span ("estimate"); None without CUDA
    # or before the first window
    gpu_busy_s: float | None = None
    gpu_busy_source: GpuBusySource | None = None
    # the loop thread's own time during the input wait, as the scheduler accounted it: on a CPU
    # (input made in the loop's thread), and runnable but waiting for a CPU; the rest of the wait
    # it slept or was blocked. None: not read (no schedstat, or an older agent)
    wait_run_s: float | None = None
    wait_queue_s: float | None = None
    # the step's compute spans as the agent timed them (None: not measured): outermost model
    # calls, backward passes, optimizer steps, each less the others nested in it and less
    # the collectives (``collective_s``)
    forward_s: float | None = None
    backward_s: float | None = None
    optimizer_s: float | None = None
    # what the agent saw of the step's phase: "train" (a backward, an optimizer step),
    # "eval" (a model call that cannot train: no_grad, eval(), predict), "" (nothing)
    phase_hint: PhaseHint = ""
    # a torch model call of the step ran with autograd on (None: no torch model call seen)
    autograd: bool | None = None
    # the user's name of an ``api`` loop's clock (``api.iterate(source="...")``; "": the clock's)
    name: str = ""

    @property
    def gpu_busy_fraction(self) -> float | None:
        """GPU busy time over the step's wall time (None when not known)."""
        if self.gpu_busy_s is None or self.duration_s <= 0:
            return None
        return min(1.0, self.gpu_busy_s / self.duration_s)


GpuBusySource = Literal["profiler", "estimate"]


_GPU_BUSY_SOURCES: tuple[GpuBusySource, ...] = get_args(GpuBusySource)


def gpu_busy_source(value: object) -> GpuBusySource | None:
    """``value`` as a busy-time source (None for anything else)."""
    return one_of(value, _GPU_BUSY_SOURCES)


@dataclass(frozen=True, slots=True)
class CudaWindow:
    """A short ``torch.profiler`` window of CUDA activity over a few whole steps.

    Times are seconds. ``wall_s`` is the host time the window's steps took; ``busy_s`` the union
    of the intervals in which the GPU ran a kernel (copies and memsets are counted apart); the
    time without any GPU activity is split into the gaps between activities (short ones: <
    ``agent.cuda_trace.SHORT_GAP_S``, the mark of kernel-launch overhead; long ones: the host
    doing something else) and the time outside any activity at the window's ends."""

    steps: int
    wall_s: float
    busy_s: float
    input_wait_s: float  # the loop's input wait during the window's steps
    kernels: int
    kernel_s: float
    median_kernel_s: float | None
    short_gaps: int
    short_gap_s: float
    long_gaps: int
    long_gap_s: float
    h2d_copies: int
    h2d_s: float
    h2d_bytes: int
    pageable_h2d: int  # host-to-device copies from pageable (not pinned) memory
    pageable_h2d_s: float
    blocking_h2d: int  # host-to-device copies the host waited for (no non_blocking)
    d2h_copies: int
    d2h_s: float
    launches: int  # kernel launch calls on the host (cudaLaunchKernel and friends)
    syncs: int  # host synchronisations (cudaStreamSynchronize, cudaDeviceSynchronize, ...)
    conv_kernels: int  # convolution kernels (channels_last is worth trying)
    bf16_kernels: int  # kernels whose names say they run in bf16 / fp16 already

    @property
    def busy_fraction(self) -> float | None:
        """GPU busy over the window's wall time."""
        return min(1.0, self.busy_s / self.wall_s) if self.wall_s > 0 else None


@dataclass(frozen=True, slots=True)
class CudaSample:
    """What the agent reads of CUDA in the workload (launch mode, PyTorch): the device, the
    caching allocator and, every ~30 s, a profiler window. Readings that failed are None and
    ``error`` says why."""

    ts: Timestamp
    pid: Pid
    device: int
    device_name: str
    bf16_supported: bool | None
    capability: str  # e.g. "9.0"
    mem_allocated: Bytes | None  # bytes in live tensors
    mem_reserved: Bytes | None  # bytes the caching allocator holds
    mem_total: Bytes | None  # the device's memory
    mem_free: Bytes | None  # free on the device (cudaMemGetInfo)
    alloc_retries: int | None  # cudaMalloc retries after freeing the cache (memory pressure)
    ooms: int | None  # out-of-memory errors the allocator raised
    window: CudaWindow | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> CudaSample | None:
        """The inverse of ``dataclasses.asdict`` (a stored ``cuda`` event's data); None when
        ``d`` is not one (a file written by another version, say)."""
        try:
            w = d.get("window")
            window = CudaWindow(**w) if isinstance(w, dict) else None
            known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
            return cls(**{**known, "window": window})  # type: ignore[arg-type]
        except TypeError:
            return None


StageKind = Literal[
    "source",  # a dataset read as a whole (tensor slices, a range, a DataLoader's Dataset)
    "map",
    "interleave",
    "batch",
    "prefetch",
    "other",
    "generator",  # tf.data from_generator: a Python generator run one element at a time
    "flat_map",  # a user's flat_map (from_generator's own is reported as its generator)
    "cache",
    "py_dataset",  # a Keras PyDataset / Sequence (its workers are the parallelism)
    "iterable",  # a torch IterableDataset (workers need it to shard by get_worker_info())
]
STAGE_KINDS: tuple[StageKind, ...] = get_args(StageKind)


def stage_kind(value: object) -> StageKind:
    """``value`` as a stage kind; one this version does not know is ``other``."""
    return one_of(value, STAGE_KINDS) or "other"


@dataclass(frozen=True, slots=True)
class PipelineStage:
    """One tf.data transformation (or DataLoader stage) with what is known of it."""

    name: str  # e.g. "ParallelMapDatasetV2", "Batch", "Prefetch", "TensorSlice"
    kind: StageKind
    parallelism: int | None
    buffer: int | None
    self_time_s: float | None  # per element, when measured
    is_bottleneck: bool = False


@dataclass(frozen=True, slots=True)
class PipelineSample:
    ts: Timestamp
    framework: str  # "tf.data" or "torch"
    stages: tuple[PipelineStage, ...]
    pid: Pid = 0
    note: str = ""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What the agent reports about itself: versions and which hooks applied (and why not)."""

    ts: Timestamp
    pid: Pid
    python: str
    frameworks: tuple[tuple[str, str], ...]  # (name, version)
    hooks_applied: tuple[str, ...]
    hooks_skipped: tuple[tuple[str, str], ...]  # (hook, reason)
    dropped: int = 0  # messages dropped because the agent's queue was full
    # (source, note): how a source's steps are measured when not one fetch per step, e.g.
    # Keras with steps_per_execution > 1 (per-step numbers are per execution / N)
    step_notes: tuple[tuple[str, str], ...] = ()


# Whether the workload has sofa-top's agent: launched with it (it has reported, or not yet),
# injected into a running process, or none (attached from outside). One rule for every place
# that says it (header, verdict, steps pane), so that a screen never says it two ways.
AgentState = Literal["launched", "waiting", "injected", "none"]


def agent_state(launched: bool, agent: AgentInfo | None) -> AgentState:
    """The agent's state for a target sofa-top ``launched`` (or attached to) and the agent's
    last report (None: none yet, or none at all)."""
    if agent is not None:
        return "launched" if launched else "injected"
    return "waiting" if launched else "none"


Sample = (
    ProcessSample
    | SystemSample
    | GpuSample
    | StackWindow
    | Event
    | StepSample
    | PipelineSample
    | AgentInfo
    | CudaSample
)
