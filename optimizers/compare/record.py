"""Record one optimizer run: launch the command headless under the agent with a spec, and stop
it once it has run enough steps."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from sofa_top.agent.toggles import OptimizeSpec
from sofa_top.collectors import children
from sofa_top.collectors.discovery import JobCopy
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import Event
from sofa_top.datamodel.verdict import Measured
from sofa_top.launch import LaunchRequest, Run, Sampling, open_launch
from sofa_top.optimizers.compare.results import CompareResult
from sofa_top.optimizers.compare.summary import measured_of
from sofa_top.optimizers.probes import tree_memory
from sofa_top.recording.store import append_events

# tree.cpu over short measured windows (headroom's CPU per step); no stacks: they cost CPU
SAMPLING = Sampling(interval_s=0.2, stack_rate_hz=1.0, stacks=False)
FLUSH_GRACE_S = 0.3  # the agent flushes every 0.1 s: the last steps arrive within this


def _steps_done(run: Run) -> int:
    """Steps of the busiest step source so far (one loop's clock, not a sum over processes)."""
    by_source: dict[tuple[str, int], int] = {}
    for s in run.session.steps():
        key = (s.source, s.pid)
        by_source[key] = max(by_source.get(key, 0), s.step + 1)
    return max(by_source.values(), default=0)


class _PeakMemory:
    """The workload tree's peak PSS, sampled about once a second."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak: int | None = None
        self._next = time.monotonic() + 0.5

    def sample(self, force: bool = False) -> None:
        if self.pid is None or (not force and time.monotonic() < self._next):
            return
        m = tree_memory(self.pid)
        self.peak = max(self.peak or 0, m or 0) or None
        self._next = time.monotonic() + 1.0


def record_one(
    cmd: Sequence[str],
    spec: OptimizeSpec,
    path: Path,
    name: str,
    target_steps: int | None,
    seconds: float | None,
    warmup: int,
    timeout_s: float,
    like: JobCopy | None = None,
    group: str | None = None,
) -> int | None:
    """Launch ``cmd`` with ``spec`` and stop it after ``warmup`` + ``target_steps`` steps (or
    ``seconds`` past the warm-up, or its exit, or ``timeout_s``). Returns the tree's peak PSS.
    ``like``: run in that job's working directory with its environment (``compare --like``).
    ``group``: the comparison this run belongs to (the session lists show it as one entry).
    Raises ``SessionCut`` when the session's end passed its bound."""
    children.prepare()  # the run is guarded the moment it is started
    run = open_launch(
        LaunchRequest(
            cmd=tuple(cmd),
            mode="record",
            name=name,
            output=str(path),
            sampling=SAMPLING,
            # every run fingerprints its batches: compare checks the data stream it was fed
            settings={"optimize": replace(spec, check_data=True).to_json()},
            cwd=like.cwd if like is not None else None,
            env=like.env if like is not None else None,
            meta={} if group is None else {"compare": {"id": group, "run": name}},
        )
    )
    session = run.session
    job = run.popen
    if job is not None:
        children.guard(job.pid)  # compare's own run: never past compare, even a killed one
    reason = "interrupted"
    try:
        session.start()
        memory = _PeakMemory(run.popen.pid if run.popen is not None else None)
        reason = _run_until_done(run, memory, target_steps, seconds, warmup, timeout_s)
        time.sleep(FLUSH_GRACE_S)
        memory.sample(force=True)
    finally:
        # compare's own stop (the run has what it needs): SIGTERM, as a job scheduler would;
        # a Ctrl-C of compare lands here too, and the run it interrupted does not run on.
        # It returns once the session is final, or cut at its bound (launch.FINISH_BOUND_S);
        # in a thread, so that a second signal's exception here cannot cut it short.
        finisher = threading.Thread(
            target=run.finish, args=(reason,), kwargs={"interrupt": False}, daemon=True
        )
        finisher.start()
        finisher.join()
        if job is not None and job.returncode is not None:
            children.release(job.pid)  # reaped (one still running stays guarded)
    if run.cut is not None:
        raise SessionCut(run.cut)
    return memory.peak


class SessionCut(Exception):
    """A run's session passed its bound at finalizing (its message says what it lacks)."""


def _run_until_done(
    run: Run,
    memory: _PeakMemory,
    target_steps: int | None,
    seconds: float | None,
    warmup: int,
    timeout_s: float,
) -> str:
    """Wait until the run has its steps (or time, or exits, or times out); returns why."""
    session = run.session
    t_end = time.monotonic() + timeout_s
    warm_at: float | None = None
    while time.monotonic() < t_end:
        memory.sample()
        if session.done or session.target_exited:
            return "target exited"
        session.wait(0.1)
        n = _steps_done(run)
        if target_steps is not None and n >= warmup + target_steps:
            return "enough steps"
        if seconds is not None and n >= warmup:
            warm_at = warm_at or time.monotonic()
            if time.monotonic() - warm_at >= seconds:
                return "enough time"
    return "timeout"


def note_measured(result: CompareResult) -> list[Measured]:
    """Carry what ``result`` measured (``summary.measured_of``) into each of its session files,
    so that their verdict quotes it (and withdraws the advice it contradicts). A file that can
    no longer be written is passed over: the comparison's own output says the same."""
    measured = measured_of(result)
    if not measured:
        return measured
    now = time.time()
    events = [Event(now, "measured", m.text, m.as_json()) for m in measured]
    for r in result.runs:
        for session in r.sessions:
            with contextlib.suppress(UserError):
                append_events(Path(session), events)
    return measured
