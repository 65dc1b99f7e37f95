"""What the UI sees: an immutable view of the session, built by the session hub about once a second.

The TUI never reads the database or the collectors; it receives ``Snapshot`` objects as Textual
messages (posted from the hub's thread) and renders them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    Event,
    GpuSample,
    PipelineSample,
    ProcessSample,
    StackClass,
    StackWindow,
    StepSample,
    SystemSample,
)
from sofa_top.datamodel.units import Percent, Pid, Timestamp
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.workload import ModelReport

# How a session was opened: sofa-top launched the workload, attached to it, or records headless
Mode = Literal["launch", "attach", "record"]
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass(frozen=True, slots=True)
class TargetInfo:
    pid: Pid
    name: str
    cmdline: tuple[str, ...]
    launched: bool = False  # True when sofa-top started it (exit code then known)


@dataclass(frozen=True, slots=True)
class FunctionStat:
    """One function in the hot-functions table (percentages of all thread-samples considered)."""

    function: str
    filename: str
    line: int
    own_pct: Percent  # samples where it is the innermost frame
    total_pct: Percent  # samples where it is anywhere on the stack
    thread: str  # thread name (or "tid N") where it was seen most
    klass: StackClass


@dataclass(frozen=True, slots=True)
class ThreadStat:
    pid: Pid
    tid: int
    name: str
    samples: int
    split: Mapping[str, float]  # class -> fraction of this thread's samples


@dataclass(frozen=True, slots=True)
class StackSummary:
    """Stack windows aggregated over a span of time."""

    ts_start: Timestamp
    ts_end: Timestamp
    thread_samples: int
    functions: tuple[FunctionStat, ...]  # sorted by own_pct, descending
    split: Mapping[str, float]  # input/compute/python/idle -> fraction (sums to 1 when samples>0)
    threads: tuple[ThreadStat, ...]
    rate_hz: float
    sampler_cpu: Percent | None
    # samples in which sofa-top's own agent was running (its thread or its frames), left out
    # of everything above: its overhead
    agent_samples: int = 0
    # helper threads idle nearly all the time (a queue feeder, DataLoader workers' main
    # threads): kept out of ``functions`` and ``split`` (the loop's threads), counted here
    idle_threads: int = 0
    idle_thread_samples: int = 0
    # the loop thread's samples outside its model calls, by what they did (``analysis.host``:
    # input / python / sync -> fraction); None when no thread was seen calling a model
    host_split: Mapping[str, float] | None = None
    host_samples: int = 0
    # the share of the loop thread's model-call samples spent building the call's own data
    # adapter and iterator (a Keras ``predict`` per sample); None without model calls
    call_setup_share: float | None = None

    @property
    def agent_fraction(self) -> float:
        """The agent's running samples over all samples, the agent's included."""
        total = self.thread_samples + self.agent_samples
        return self.agent_samples / total if total else 0.0


Point = tuple[Timestamp, float | None]
LOG_LINES = 1000


@dataclass(frozen=True, slots=True)
class Snapshot:
    ts: Timestamp
    started: Timestamp
    target: TargetInfo
    session_path: str
    recording: bool
    history: Mapping[str, tuple[Point, ...]]  # series name -> per-second points, oldest first
    process: ProcessSample | None = None
    system: SystemSample | None = None
    gpu: GpuSample | None = None
    stacks: StackSummary | None = None  # recent windows aggregated (about the last 5 s)
    stacks_by_thread: Mapping[int, StackSummary] = field(default_factory=dict)  # tid -> summary
    last_stack_window: StackWindow | None = None  # carries sampler error/hint and rate
    events: tuple[Event, ...] = ()  # most recent last
    target_exited: bool = False
    exit_code: int | None = None
    cpu_count: int = 1  # the cores the target may use (affinity, cgroup quota)
    verdict: Verdict | None = None  # judged over about the last 10 s
    steps: tuple[StepSample, ...] = ()  # recent steps (launch mode), oldest first
    pipeline: PipelineSample | None = None  # latest tf.data / DataLoader stage view (agent)
    agent: AgentInfo | None = None  # framework versions and hooks applied/skipped (agent)
    logs: tuple[Event, ...] = ()  # workload output lines (kind "log"), last LOG_LINES, oldest first
    logs_dropped: int = 0  # output lines not kept (flood protection)
    # output lines still being rewritten with \r (progress bars), their current text
    log_progress: tuple[Event, ...] = ()
    read_only: bool = False  # a replay: no live data, ``ts`` is the cursor
    ranks: tuple[RankStat, ...] = ()  # a distributed job's ranks, by rank (about the last 10 s)
    rank_verdict: Verdict | None = None  # "straggler" or "balanced", with two or more ranks
    cuda: CudaSample | None = None  # the agent's latest CUDA reading (GPU loops)
    model: ModelReport | None = None  # the agent's model and thread-pool report (launch mode)
