"""Immutable samples: the only thing collectors hand to the rest of sofa-top.

Every sample carries its timestamp, and a failed reading carries its error as data
(``error`` is a short human-readable string) instead of raising. Missing hardware or
permission is a *state* (e.g. ``GpuSample.status == "no-gpu"``), not an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from sofa_top.model.units import Bytes, Celsius, Hertz, MHz, Percent, Pid, Timestamp, Watts

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
    role: str = ""  # e.g. "target", "child", "DataLoader worker"
    error: str | None = None


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
    # how the store keeps the agent's reports: read back as events of these kinds
    "agent",  # an AgentInfo (data: its fields)
    "pipeline",  # a PipelineSample (data: its fields)
]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)


def event_kind(value: object) -> EventKind | None:
    """``value`` as an event kind, or None when this version does not know it."""
    for kind in EVENT_KINDS:
        if value == kind:
            return kind
    return None


@dataclass(frozen=True, slots=True)
class Event:
    """A marker in the session: target exit, verdict change, collector state change, ..."""

    ts: Timestamp
    kind: EventKind
    message: str
    data: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepSample:
    """One training step as the in-process agent measured it (launch mode)."""

    ts: Timestamp  # step end
    step: int
    start: Timestamp
    duration_s: float  # step time: end of previous step (or first fetch) to end of this one
    input_wait_s: float  # time the loop waited for the next batch within this step
    source: str  # "tf-eager", "keras-fit", "torch-dataloader", "torch-optimizer", ...
    batch_size: int | None = None
    pid: Pid = 0
    # CPU seconds the process used (all its threads) while the loop waited: input work done in
    # the process (tf.data's threads, a DataLoader without workers); None when not measured
    wait_cpu_s: float | None = None


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
    for kind in STAGE_KINDS:
        if value == kind:
            return kind
    return "other"


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


Sample = (
    ProcessSample
    | SystemSample
    | GpuSample
    | StackWindow
    | Event
    | StepSample
    | PipelineSample
    | AgentInfo
)
