"""The ranks of a distributed job as the hub sees them: which processes are ranks, each rank's
recent steps, CPU and input pipeline, and how each ended.

The hub feeds it every sample (``absorb``, on the hub's thread) and writes the events it
returns: ``rank`` when a process is first known as a rank, ``rank-exit`` when a rank's process
ends (with its exit code when the zombie could be read and the uncaught exception its agent
reported). ``evidence`` hands ``analysis.ranks`` what it judges each snapshot. ``session_ranks``
does the same from a session file, for ``record --json`` and replay.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from sofa_top.analysis.ranks import RankEvidence, owners, rank_roots
from sofa_top.datamodel.ranks import RankId
from sofa_top.datamodel.samples import (
    Event,
    PipelineSample,
    ProcessSample,
    Sample,
    StepSample,
)
from sofa_top.datamodel.units import Pid

EXIT_WAIT_S = 1.0  # a rank's exit waits this long for its agent's goodbye (it names the error)
STEPS_KEPT = 3000  # per rank: 10 s of a 300 steps/s loop
NO_GOODBYE = "its agent disconnected without a goodbye (killed?)"


def rank_event(ts: float, pid: Pid, ident: RankId) -> Event:
    """The ``rank`` event that says ``pid`` is ``ident``."""
    world = f" of {ident.world_size}" if ident.world_size is not None else ""
    return Event(
        ts,
        "rank",
        f"pid {pid} is rank {ident.rank}{world} on node {ident.node}",
        {"pid": pid, **ident.as_json()},
    )


STOPPED = "stopped by sofa-top (it signalled the job to end)"


def exit_text(code: int | None, error: str, stopping: bool = False) -> str:
    """How a rank ended, as the ranks pane and ``record --json`` say it (``stopping``: sofa-top
    was stopping the job it launched when the rank went)."""
    # sofa-top stops a job as Ctrl-C would: a rank's KeyboardInterrupt is that, no error
    interrupted = error.startswith("KeyboardInterrupt")
    if stopping and (error in ("", NO_GOODBYE) or interrupted):
        if code is None:
            # the exit status went to the launcher (torchrun), not to sofa-top: what is known
            # is that sofa-top had just signalled the job
            return STOPPED
        if code < 0:
            return f"stopped by sofa-top ({_signal_name(-code)})"
        return f"stopped by sofa-top (it exited with code {code})"
    if code is not None and code < 0:
        # a signal explains the missing goodbye; an error the agent reported is worth keeping
        name = _signal_name(-code)
        return f"killed by {name}" + (f": {error}" if error and error != NO_GOODBYE else "")
    text = "exited" if code is None else f"exited with code {code}"
    return f"{text}: {error}" if error else text


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class RankTracker:
    """Live rank state; used only from the hub's thread."""

    def __init__(self) -> None:
        self.roots: dict[Pid, RankId] = {}
        self.exits: dict[Pid, str] = {}  # how each rank that ended did
        self._reported: dict[Pid, tuple[Pid, RankId]] = {}  # from agents' hello frames
        self._steps: dict[Pid, deque[StepSample]] = {}
        self._cpu: dict[Pid, deque[tuple[float, float, float]]] = {}  # ts, rank tree, workers
        self._pipelines: dict[Pid, PipelineSample] = {}
        self._agent_end: dict[Pid, str] = {}  # pid -> the error its agent reported ("" clean)
        self._pending: dict[Pid, tuple[float, int | None]] = {}  # exited, not yet reported
        self.stopping = False  # sofa-top is stopping the job it launched (the hub sets it)

    def absorb(self, s: Sample) -> list[Event]:
        """Take one sample; the rank events it causes (the hub stores them)."""
        out: list[Event] = []
        if isinstance(s, StepSample):
            steps = self._steps.get(s.pid)
            if steps is None and (s.pid in self.roots or s.pid in self._reported):
                steps = self._steps[s.pid] = deque(maxlen=STEPS_KEPT)
            if steps is not None:
                steps.append(s)
        elif isinstance(s, ProcessSample):
            out += self._processes(s)
        elif isinstance(s, PipelineSample):
            self._pipelines[s.pid] = s
        elif isinstance(s, Event):
            pid = s.data.get("pid")
            if isinstance(pid, int):
                self._agent_event(s, pid)
        if self._pending:
            out += self._report_exits(s.ts, force=False)
        return out

    def _agent_event(self, e: Event, pid: Pid) -> None:
        if e.kind == "agent-connected":
            raw, ppid = e.data.get("rank"), e.data.get("ppid")
            ident = RankId.from_json(raw) if isinstance(raw, dict) else None
            if ident is not None:
                self._reported[pid] = (ppid if isinstance(ppid, int) else 0, ident)
        elif e.kind == "agent-exit":
            error = e.data.get("error")
            self._agent_end[pid] = error if isinstance(error, str) else ""
        elif e.kind == "agent-disconnected":
            self._agent_end.setdefault(pid, NO_GOODBYE)

    def _processes(self, s: ProcessSample) -> list[Event]:
        out: list[Event] = []
        reported = {pid: r for pid, r in self._reported.items() if pid not in self.roots}
        for pid, ident in rank_roots(s.procs, reported).items():
            if pid not in self.roots:
                self.roots[pid] = ident
                out.append(rank_event(s.ts, pid, ident))
        if not self.roots:
            return out
        live = [p for p in s.procs if p.alive]
        belongs = owners({p.pid: p.ppid for p in live}, self.roots)
        tree: dict[Pid, float] = {}
        workers: dict[Pid, float] = {}
        for p in live:
            root = belongs.get(p.pid)
            if root is None or p.cpu_percent is None:
                continue
            tree[root] = tree.get(root, 0.0) + p.cpu_percent
            if p.pid != root:
                workers[root] = workers.get(root, 0.0) + p.cpu_percent
        for root, cpu in tree.items():
            ring = self._cpu.setdefault(root, deque(maxlen=400))
            ring.append((s.ts, cpu, workers.get(root, 0.0)))
        for p in s.procs:
            gone = not p.alive or p.state == "exited"
            if gone and p.pid in self.roots and p.pid not in self.exits:
                self._pending.setdefault(p.pid, (time.monotonic(), p.exit_code))
        return out

    def _report_exits(self, ts: float, *, force: bool) -> list[Event]:
        out: list[Event] = []
        now = time.monotonic()
        for pid, (seen, code) in list(self._pending.items()):
            if not force and pid not in self._agent_end and now - seen < EXIT_WAIT_S:
                continue
            del self._pending[pid]
            ident = self.roots[pid]
            text = exit_text(code, self._agent_end.get(pid, ""), self.stopping)
            self.exits[pid] = text
            out.append(
                Event(
                    ts,
                    "rank-exit",
                    f"rank {ident.rank} (pid {pid}) {text}",
                    {
                        "pid": pid,
                        "rank": ident.rank,
                        "node": ident.node,
                        "exit_code": code,
                        "error": self._agent_end.get(pid) or None,
                        "stopped": self.stopping,
                    },
                )
            )
        return out

    def flush(self, ts: float) -> list[Event]:
        """At the end of the session: report every exit still waiting for its goodbye."""
        return self._report_exits(ts, force=True) if self._pending else []

    def evidence(self, cutoff: float) -> list[RankEvidence]:
        """Each rank's evidence since ``cutoff`` (Unix time)."""
        out: list[RankEvidence] = []
        for pid, ident in self.roots.items():
            cpu = [(t, w) for ts, t, w in self._cpu.get(pid, ()) if ts >= cutoff]
            out.append(
                RankEvidence(
                    ident=ident,
                    pid=pid,
                    steps=[s for s in self._steps.get(pid, ()) if s.ts >= cutoff],
                    tree_cpu=statistics.fmean(t for t, _ in cpu) if cpu else None,
                    child_cpu=statistics.fmean(w for _, w in cpu) if cpu else None,
                    pipeline=self._pipelines.get(pid),
                    alive=pid not in self.exits and pid not in self._pending,
                    exit=self.exits.get(pid),
                )
            )
        return out


def session_ranks(
    rank_events: Iterable[Event],
    exit_events: Iterable[Event],
    steps: Sequence[StepSample],
    parents: Mapping[Pid, Pid],
    cpu_means: Mapping[Pid, float],
    pipelines: Mapping[Pid, PipelineSample],
) -> list[RankEvidence]:
    """Each rank's evidence from a session file: its ``rank`` events, the steps of its process,
    the mean CPU of its processes (``cpu_means``: pid -> mean % of one core) and its pipeline."""
    roots: dict[Pid, RankId] = {}
    for e in rank_events:
        pid = e.data.get("pid")
        ident = RankId.from_json(e.data)
        if isinstance(pid, int) and ident is not None:
            roots.setdefault(pid, ident)
    exits: dict[Pid, str] = {}
    for e in exit_events:
        pid, code, error = e.data.get("pid"), e.data.get("exit_code"), e.data.get("error")
        if isinstance(pid, int):
            exits[pid] = exit_text(
                code if isinstance(code, int) else None,
                error if isinstance(error, str) else "",
                e.data.get("stopped") is True,
            )
    by_pid: dict[Pid, list[StepSample]] = {}
    for s in steps:
        if s.pid in roots:
            by_pid.setdefault(s.pid, []).append(s)
    belongs = owners(parents, roots)
    tree: dict[Pid, float] = {}
    workers: dict[Pid, float] = {}
    for pid, root in belongs.items():
        cpu = cpu_means.get(pid)
        if cpu is None:
            continue
        tree[root] = tree.get(root, 0.0) + cpu
        if pid != root:
            workers[root] = workers.get(root, 0.0) + cpu
    return [
        RankEvidence(
            ident=ident,
            pid=pid,
            steps=by_pid.get(pid, []),
            tree_cpu=tree.get(pid),
            child_cpu=workers.get(pid, 0.0) if pid in tree else None,
            pipeline=pipelines.get(pid),
            alive=pid not in exits,
            exit=exits.get(pid),
        )
        for pid, ident in roots.items()
    ]
