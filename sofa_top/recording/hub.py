"""The session hub: the single data path from collectors to the store, the rings and the UI.

collectors (threads) --emit--> queue --> hub thread --> SessionStore (commit <= 0.5 s)
                                                   \\--> Rings / latest samples --> Snapshot
                                                        --> on_snapshot (UI: post_message)
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sofa_top import __version__
from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.causes import Neighbours, neighbours_of, sched_means
from sofa_top.analysis.ranks import cross_rank_verdict, rank_stats
from sofa_top.analysis.sources import SourceReader, workload_dirs
from sofa_top.analysis.stackstats import STACK_SUMMARY_S, summarize, summarize_by_thread
from sofa_top.analysis.steps import RunFacts
from sofa_top.analysis.verdicts import MIN_STEPS, WINDOW_S, Evidence, judge
from sofa_top.collectors.base import BACKPRESSURE, Collector
from sofa_top.collectors.cores import workload_cores
from sofa_top.datamodel.ranks import RankStat
from sofa_top.datamodel.samples import (
    AgentInfo,
    CudaSample,
    Event,
    GpuSample,
    PipelineSample,
    ProcessSample,
    Sample,
    StackWindow,
    StepSample,
    SystemSample,
    TreeSched,
)
from sofa_top.datamodel.snapshot import LOG_LINES, Mode, Snapshot, StackSummary, TargetInfo
from sofa_top.datamodel.source import OnSnapshot
from sofa_top.datamodel.verdict import Measured, Verdict
from sofa_top.datamodel.verdict_evidence import ProcessEvidence, StragglerEvidence
from sofa_top.datamodel.workload import ModelReport, merge, model_report
from sofa_top.recording.ranks_live import RankTracker
from sofa_top.recording.report import session_verdict
from sofa_top.recording.rings import Rings
from sofa_top.recording.series import SeriesPoint
from sofa_top.recording.store import SessionStore

COMMIT_EVERY_S = 0.5  # the promise is "at least once a second"; half leaves margin
JUDGE_UNWATCHED_S = 1.0  # with no consumer (record), the verdict is still judged this often
QUEUE_MAX = 10_000
# A collector that can wait fills the queue only up to here: the rest stays free for the
# collectors that cannot (process, system, GPU, stacks, logs).
QUEUE_WAITING_MAX = QUEUE_MAX - 2_000
EXIT_GRACE_S = 0.1  # after the target exits, let its last output and agent frames arrive (the
# agent collector also reads what is left in its sockets when it stops)
COLLECTOR_STOP_S = 10.0  # a stop waits this long for the collectors (a stalled one is left)
# The most a stop waits for the session's end: the collectors' stop (up to COLLECTOR_STOP_S),
# the `ended` record, the final verdict's read of the file (a 2-hour session: 3 s of CPU, 7 s
# on a 2-core machine at load 8-10, benchmarks/finalize.py) and the file's close, with room for
# a machine loaded many times over. Past it sofa-top leaves rather than hang: the file keeps
# every commit, and one line says what was cut.
FINALIZE_S = 60.0
# Past FINALIZE_S: the hub drops what the collectors still hold, skips the final verdict and
# writes the `ended` record; a stop waits this long for that.
CUT_GRACE_S = 5.0
EXITED_SNAPSHOT_S = 0.25  # snapshots after the target's exit, until the session is final
CUDA_WINDOW_S = 90.0  # the agent's profiler windows come every ~30 s: the verdict sees 3


class Session:
    """Runs collectors, records everything they emit and produces UI snapshots."""

    def __init__(
        self,
        target: TargetInfo,
        collectors: Sequence[Collector],
        store: SessionStore,
        *,
        mode: Mode,
        snapshot_interval: float = 1.0,
        extra_meta: dict[str, Any] | None = None,
    ) -> None:
        self.target = target
        # the workload's files, for the lines its host time ran (``analysis.host``): this
        # session's, and every line read is recorded (meta ``source_lines``) for its replay
        self._sources = SourceReader(workload_dirs(target.pid, target.cmdline))
        self.mode = mode
        self.collectors = list(collectors)
        self.store = store
        self.session_path = str(store.path)
        self.snapshot_interval = snapshot_interval
        self.started = time.time()
        self._queue: queue.Queue[Sample] = queue.Queue(maxsize=QUEUE_MAX)
        self._stop_collectors = threading.Event()
        self._stop_hub = threading.Event()
        self._done = threading.Event()
        self._cut_asked = threading.Event()  # a stop passed its bound: end the file now
        self._ended = threading.Event()  # the `ended` record is committed
        self.final_stored = False  # the final verdict is committed
        self._final_lock = threading.Lock()  # the verdict's commit, or the cut that drops it
        self.cut: str | None = None  # what the file lacks when a stop passed its bound
        self._threads: list[threading.Thread] = []
        self._hub: threading.Thread | None = None
        self._on_snapshot: OnSnapshot | None = None
        self._judged_at = 0.0  # when the verdict was last judged without a consumer
        self._lock = threading.Lock()
        self.dropped = 0
        self.end_reason: str | None = None  # why the session ends, once it does
        self.job_stopped = False  # sofa-top signalled the job it launched (stopping_job)
        self.failure: str | None = None  # why recording stopped early, when sofa-top failed
        # UI-side state, touched only by the hub thread.
        self._rings = Rings()
        self._process: ProcessSample | None = None
        self._system: SystemSample | None = None
        self._gpu: GpuSample | None = None
        self._windows: deque[StackWindow] = deque(maxlen=120)
        self._events: deque[Event] = deque(maxlen=200)
        self._steps: deque[StepSample] = deque(maxlen=2000)
        self._training = False  # a step showed training: the others are evaluation, not inference
        # (ts, tree CPU, CPU of the tree less the target) per process sample, for the verdict
        self._cpu: deque[tuple[float, float | None, float]] = deque(maxlen=400)
        self._runnable: deque[tuple[float, int]] = deque(maxlen=100)  # (ts, R threads)
        # (ts, what the tree's threads did since the previous reading), about twice a second
        self._sched: deque[tuple[float, TreeSched]] = deque(maxlen=100)
        self._neighbours: Neighbours | None = None  # the last scan of the other processes
        self._measured: list[Measured] = []  # what comparisons of this workload measured
        # one core count for every number shown: the cores the target may use
        self.cores = workload_cores(target.pid)
        self._model: ModelReport | None = None
        self._pipeline: PipelineSample | None = None
        self._agent: AgentInfo | None = None
        self._cuda: deque[CudaSample] = deque(maxlen=200)
        self._logs: deque[Event] = deque(maxlen=LOG_LINES)
        self._logs_dropped = 0
        self._progress: dict[str, Event] = {}  # stream -> its line being rewritten with \r
        self._frameworks: tuple[str, ...] = ()
        self._verdict: Verdict | None = None
        self._ranks = RankTracker()
        self._rank_stats: tuple[RankStat, ...] = ()
        self._rank_verdict: Verdict | None = None
        self.target_exited = False
        self._exit_seen = 0.0
        self._exit_ts = 0.0  # when the target exited (its last process sample)
        self._publish_due = False  # publish at once (the target exited)
        self._final: Verdict | None = None  # the whole session's, judged at its end
        self._last_point_ts = 0.0  # the last instant a series has a point for (replay's end)
        self.exit_code: int | None = None
        store.set_meta(
            mode=mode,
            target={"pid": target.pid, "name": target.name, "cmdline": list(target.cmdline)},
            host=platform.node(),
            versions={"sofa_top": __version__, "python": sys.version.split()[0]},
            started=self.started,
            cpu_count=self.cores,
            machine_cpu_count=os.cpu_count() or 1,
            launched=target.launched,
            source_dirs=list(self._sources.dirs.dirs),
            source_lines=[],
            **(extra_meta or {}),
        )
        store.commit()

    # -- SnapshotSource --------------------------------------------------------------------
    def start(self, on_snapshot: OnSnapshot | None = None) -> None:
        """Start the collector threads and the hub thread; returns at once."""
        self._on_snapshot = on_snapshot
        for c in self.collectors:
            t = threading.Thread(target=self._run_collector, args=(c,), name=f"sofa-{c.name}")
            t.daemon = True
            t.start()
            self._threads.append(t)
        self._hub = threading.Thread(target=self._hub_loop, name="sofa-hub", daemon=True)
        self._hub.start()

    def stopping_job(self, reason: str) -> None:
        """sofa-top is about to signal the job it launched: the session ends for ``reason``
        (not "target exited"), and ranks that go from here on were stopped by sofa-top."""
        with self._lock:
            if self.end_reason is None:
                self.end_reason = reason
        self.job_stopped = True

    def stop(self, reason: str = "stopped", timeout: float = FINALIZE_S) -> bool:
        """Stop collecting, flush everything queued, finalize the file; True once it is final
        (its `ended` record and final verdict committed) and the hub done. Past ``timeout`` the
        hub is told to drop what is left and write `ended` without the verdict (this waits
        ``CUT_GRACE_S`` for it), ``cut`` says what the file lacks, and this returns False.
        Idempotent (a stop after a cut returns at once)."""
        with self._lock:
            if self.end_reason is None:
                self.end_reason = reason
        self._stop_collectors.set()
        self._stop_hub.set()  # the hub records what the collectors leave, then finalizes
        hub = self._hub
        if hub is None:  # never started: still leave a finalized file behind
            self._finalize()
            return True
        if self.cut is not None:
            return False
        asked = time.monotonic()
        hub.join(timeout)
        if not hub.is_alive():
            return True
        with self._final_lock:
            self._cut_asked.set()
            if self.final_stored:  # all is committed; only the WAL's checkpoint is left
                return True
        self._ended.wait(CUT_GRACE_S)
        self.cut = self._cut_line(time.monotonic() - asked)
        return False

    def _cut_line(self, took: float) -> str:
        """What a session cut at finalizing lacks (one line, after ``sofa-top: ``)."""
        if self._ended.is_set():
            lacks = "no final verdict"
            keeps = "has all that was recorded and its `ended` record"
        else:
            lacks = "no `ended` record, no final verdict"
            keeps = "keeps what was committed until then"
        return (
            f"the session was cut at finalizing: {lacks} (the hub took > {took:.0f} s); "
            f"{self.session_path} {keeps}"
        )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the session is finalized (target exit or stop); True if it was."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    # -- internals -------------------------------------------------------------------------
    def _emit(self, sample: Sample) -> None:
        try:
            self._queue.put_nowait(sample)
        except queue.Full:
            # The hub fell behind (e.g. a stalled disk); dropping beats blocking collectors.
            self.dropped += 1

    def _emit_waiting(self, sample: Sample) -> None:
        """Emit for a source that can wait: block while the hub is behind (the socket then
        fills and the agent drops and counts in its own queue), never past the session."""
        q = self._queue
        while q.qsize() >= QUEUE_WAITING_MAX:
            if self._done.is_set():  # the hub records until the collectors are done
                self.dropped += 1
                return
            time.sleep(0.005)
        self._emit(sample)

    def _run_collector(self, c: Collector) -> None:
        emit = self._emit_waiting if c.name in BACKPRESSURE else self._emit
        try:
            c.run(emit, self._stop_collectors)
        except Exception as exc:  # a collector bug must not take the session down
            self._emit(
                Event(time.time(), "collector-failed", f"{c.name} collector stopped: {exc!r}")
            )

    def _hub_loop(self) -> None:
        try:
            self._hub_run()
        except Exception as exc:
            # The store failed (a full disk, a damaged file): stop collecting. Everything
            # committed up to the last second stays readable; say why it ended.
            why = f"{type(exc).__name__}: {exc}"
            self.failure = why
            with self._lock:
                self.end_reason = f"recording failed: {why}"
            self._stop_collectors.set()
            self._stop_hub.set()
        finally:
            self._finalize()
            self._publish()

    def _hub_run(self) -> None:
        next_snapshot = time.monotonic()
        while True:
            batch = self._drain(timeout=0.05)
            if batch:
                self._record(batch)
            if time.monotonic() - self.store.last_commit >= COMMIT_EVERY_S:
                self.store.commit()
            if (
                self.target_exited
                and not self._stop_collectors.is_set()
                and time.monotonic() >= self._exit_seen + EXIT_GRACE_S
            ):
                with self._lock:
                    if self.end_reason is None:
                        self.end_reason = "target exited"
                self._stop_collectors.set()
                self._stop_hub.set()
            if self._stop_hub.is_set():
                self._finish_collectors()
                break
            now = time.monotonic()
            if now >= next_snapshot or self._publish_due:
                # after the exit, often: the workload's last error line is on its way
                every = EXITED_SNAPSHOT_S if self.target_exited else self.snapshot_interval
                next_snapshot = now + min(every, self.snapshot_interval)
                self._publish_due = False
                self._publish()

    def _finish_collectors(self) -> None:
        """Keep recording while the collectors stop (the agent collector reads what its
        sockets still hold: a flood's backlog, the agent's bye), then take all they left."""
        deadline = time.monotonic() + COLLECTOR_STOP_S
        cut = self._cut_asked
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            if cut.is_set():
                return
            batch = self._drain(timeout=0.05)
            if batch:
                self._record(batch)
        while not cut.is_set() and (batch := self._drain(timeout=0)):
            self._record(batch)

    def _drain(self, timeout: float) -> list[Sample]:
        out: list[Sample] = []
        try:
            out.append(self._queue.get(timeout=timeout) if timeout else self._queue.get_nowait())
            while len(out) < 5000:
                out.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return out

    def _record(self, batch: list[Sample]) -> None:
        """Store a batch, then take it into the UI state (with the points the store derived)."""
        for s, points in zip(batch, self.store.write(batch), strict=True):
            self._absorb(s, points)
            if points:
                self._last_point_ts = max(self._last_point_ts, s.ts)

    def _absorb(self, s: Sample, points: list[SeriesPoint]) -> None:
        for name, value, _err in points:
            self._rings.add(name, s.ts, value)
        # ranks that exit once sofa-top signalled the job it launched were stopped by it
        self._ranks.stopping = self.job_stopped
        rank_events = self._ranks.absorb(s)
        if rank_events:
            self._events.extend(rank_events)
            self.store.write(rank_events)
        if isinstance(s, ProcessSample):
            self._process = s
            children = sum(
                p.cpu_percent or 0.0 for p in s.procs if p.alive and p.pid != s.target_pid
            )
            self._cpu.append((s.ts, s.tree_cpu_percent, children))
            if s.tree_runnable is not None:
                self._runnable.append((s.ts, s.tree_runnable))
            if s.sched is not None:
                self._sched.append((s.ts, s.sched))
            if s.cores is not None:
                self.cores = s.cores
            if not s.target_alive and not self.target_exited:
                self.target_exited = True
                self._exit_seen = time.monotonic()
                self._exit_ts = s.ts
                self.exit_code = s.exit_code
                self._publish_due = True  # the exit's verdict, at once
        elif isinstance(s, SystemSample):
            self._system = s
        elif isinstance(s, GpuSample):
            self._gpu = s
        elif isinstance(s, StackWindow):
            self._windows.append(s)
            self._sources.read_leaves(s)
        elif isinstance(s, StepSample):
            self._steps.append(s)
            self._training = self._training or step_facts.trained((s,))
        elif isinstance(s, Event):
            if s.kind == "log":
                self._logs.append(s)
                self._progress.pop(str(s.data.get("stream")), None)  # that line is done
            elif s.kind == "log-progress":
                self._progress[str(s.data.get("stream"))] = s
            elif s.kind == "log-dropped":
                self._logs_dropped = int(str(s.data.get("dropped", 0)))
            elif s.kind == "neighbours":  # a reading, not a marker: kept out of the events
                self._neighbours = neighbours_of(s.data) or self._neighbours
            else:
                if s.kind == "measured" and (m := Measured.from_json(s.data)) is not None:
                    self._measured.append(m)
                if s.kind == "agent-model" and (report := model_report(s.data)) is not None:
                    self._model = merge(self._model, report)
                self._events.append(s)
        elif isinstance(s, PipelineSample):
            self._pipeline = s
        elif isinstance(s, AgentInfo):
            self._agent = s
            self._frameworks = tuple(name for name, _v in s.frameworks)
        elif isinstance(s, CudaSample):
            self._cuda.append(s)

    def _record_sources(self) -> None:
        """Record the source lines read so far, when there are new ones (meta
        ``source_lines``: a replay and ``record --json`` read these, not the disk)."""
        lines = self._sources.unwritten()
        if lines is not None:
            self.store.set_meta(source_lines=lines)

    _finalized = False

    def _finalize(self) -> None:
        if self._finalized:
            return
        self._finalized = True
        with contextlib.suppress(Exception):  # the store may be what failed
            self.store.write(self._ranks.flush(time.time()))
        meta: dict[str, Any] = {"ended": time.time(), "end_reason": self.end_reason or "stopped"}
        if self.exit_code is not None:
            meta["exit_code"] = self.exit_code
        if self.target.launched:
            meta["stopped_job"] = self.job_stopped
        if self.dropped:
            meta["dropped_samples"] = self.dropped
        with contextlib.suppress(Exception):  # before the final verdict reads them back
            self._record_sources()
        with contextlib.suppress(Exception):  # first, and committed: the verdict may be cut
            self.store.set_meta(**meta)
            self.store.commit()
            self._ended.set()
        if self.failure is None and not self._cut_asked.is_set():
            with contextlib.suppress(Exception):  # a verdict is never worth the file
                self._store_final_verdict()
        with contextlib.suppress(Exception):
            self.store.close(**meta)
        self._done.set()

    def _store_final_verdict(self) -> None:
        """Judge the whole session from the file, as ``record --json`` does, and store it as
        the session's last verdict: the dashboard ends on it, and a replay at the end of the
        file and ``record --json`` read it back."""
        verdict = session_verdict(self.session_path)
        # at the recording's last instant: a replay's cursor ends there and reads it back
        at = self._last_point_ts or time.time()
        ev = Event(at, "verdict", verdict.headline, {**verdict.as_json(), "final": True})
        with self._final_lock:  # a stop past its bound said the file has none: it has none
            if self._cut_asked.is_set():
                return
            self.store.write([ev])
            self.store.commit()
            self.final_stored = True
        self._events.append(ev)
        self._verdict = self._final = verdict

    def snapshot(self) -> Snapshot:
        """Build an immutable view of the recent session (called on the hub thread)."""
        now = time.time()
        summary, by_thread, verdict = self._judge_now(now)
        return Snapshot(
            ts=now,
            started=self.started,
            target=self.target,
            session_path=self.session_path,
            recording=not self._finalized,
            history=self._rings.history(),
            process=self._process,
            system=self._system,
            gpu=self._gpu,
            stacks=summary,
            stacks_by_thread=by_thread,
            last_stack_window=self._windows[-1] if self._windows else None,
            events=tuple(self._events)[-50:],
            target_exited=self.target_exited,
            exit_code=self.exit_code,
            cpu_count=self.cores,
            verdict=verdict,
            steps=tuple(self._steps)[-600:],
            pipeline=self._pipeline,
            agent=self._agent,
            logs=tuple(self._logs),
            logs_dropped=self._logs_dropped,
            ranks=self._rank_stats,
            rank_verdict=self._rank_verdict,
            cuda=self._latest_cuda(),
            log_progress=tuple(self._progress.values()),
            model=self._model,
        )

    def _judge_now(
        self, now: float
    ) -> tuple[StackSummary | None, dict[int, StackSummary], Verdict | None]:
        """The recent stacks summary and the job's and ranks' verdicts, as of ``now``."""
        recent = [w for w in self._windows if w.ts_end > now - STACK_SUMMARY_S] or list(
            self._windows
        )[-1:]
        summary, by_thread = summarize_by_thread(recent, self._sources)
        verdict = self._judge(now, summary, by_thread)
        self._judge_ranks(now)
        self._record_sources()
        return summary, by_thread, verdict

    def _judge_ranks(self, now: float) -> None:
        """Per-rank statistics and the cross-rank verdict; a marker when the verdict changes."""
        if self.target_exited or not self._ranks.roots:
            return  # after the exit the last judgement stands, as for the verdict
        common = Evidence(
            cpu_count=self.cores,
            system=self._system,
            gpu=self._gpu,
            frameworks=self._frameworks,
        )
        self._rank_stats = rank_stats(self._ranks.evidence(now - WINDOW_S), common)
        verdict = cross_rank_verdict(self._rank_stats)
        prev = self._rank_verdict
        if verdict is not None and (
            prev is None or (prev.kind, _rank_of(prev)) != (verdict.kind, _rank_of(verdict))
        ):
            ev = Event(now, "rank-verdict", verdict.headline, verdict.as_json())
            self._events.append(ev)
            if not self._finalized:
                self.store.write([ev])
        self._rank_verdict = verdict

    def _latest_cuda(self) -> CudaSample | None:
        """The agent's latest CUDA reading, with the latest profiler window it sent."""
        if not self._cuda:
            return None
        last = self._cuda[-1]
        window = next((c.window for c in reversed(self._cuda) if c.window is not None), None)
        return last if last.window is not None or window is None else replace(last, window=window)

    def _judge(
        self, now: float, summary: StackSummary | None, by_thread: dict[int, StackSummary]
    ) -> Verdict | None:
        """Re-evaluate the verdict over the last ~10 s; store a marker when it changes. After
        the target's exit: over the 10 s before it, with how it ended (its exit code and last
        error line), until the session's final verdict replaces it."""
        if self._final is not None:
            return self._final
        facts = RunFacts(
            mode=self.mode, launched=self.target.launched, agent=self._agent,
            stopped=self.job_stopped if self.target.launched else None,
        )  # fmt: skip
        if self.target_exited:
            now = self._exit_ts
            facts = replace(facts, exit_code=self.exit_code)
            if step_facts.failed(facts):
                facts = replace(facts, workload_error=self._stderr_tail())
        cutoff = now - WINDOW_S
        steps = [s for s in step_facts.valid_steps(self._steps, self._agent) if s.ts >= cutoff]
        if len(steps) < MIN_STEPS:
            # steps longer than the window (an LBFGS step, say) still count: the last few,
            # while the loop is still in its next one
            last = list(self._steps)[-MIN_STEPS:]
            longest = max((s.duration_s for s in last), default=0.0)
            if last and now - last[-1].ts <= max(WINDOW_S, 2 * longest):
                steps = last
        windows = [w for w in self._windows if w.ts_end >= cutoff]
        recent = [(t, c) for ts, t, c in self._cpu if ts >= cutoff and t is not None]
        tree_cpu = statistics.fmean(t for t, _ in recent) if recent else None
        child_cpu = statistics.fmean(c for _, c in recent) if recent else None
        runnable = [n for ts, n in self._runnable if ts >= cutoff]
        verdict = judge(
            Evidence(
                steps=steps,
                stacks=summarize(windows, sources=self._sources) if windows else summary,
                tree_cpu=tree_cpu,
                child_cpu=child_cpu,
                cpu_count=self.cores,
                system=self._system,
                gpu=self._gpu,
                pipeline=self._pipeline,
                frameworks=self._frameworks,
                cuda=[c for c in self._cuda if c.ts >= now - CUDA_WINDOW_S],
                facts=facts,
                runnable_threads=statistics.fmean(runnable) if runnable else None,
                model=self._model,
                sched=sched_means(r for ts, r in self._sched if ts >= cutoff),
                neighbours=self._neighbours,
                measured=tuple(self._measured),
                training=self._training,
            )
        )
        prev = self._verdict
        # a new measurement is a change too: the marker then carries what was measured
        if prev is None or (prev.kind, prev.severity, _measured(prev)) != (
            verdict.kind,
            verdict.severity,
            _measured(verdict),
        ):
            ev = Event(now, "verdict", verdict.headline, verdict.as_json())
            self._events.append(ev)
            if not self._finalized:  # a session cut at finalizing judges on, unrecorded
                self.store.write([ev])
        self._verdict = verdict
        return verdict

    def steps(self) -> list[StepSample]:
        return list(self._steps)

    def note_measured(self, measured: Sequence[Measured]) -> None:
        """What a comparison of this workload measured: stored in the session, and carried by
        its verdict from the next judgement on (thread-safe: through the hub's queue)."""
        for m in measured:
            self._emit(Event(time.time(), "measured", m.text, m.as_json()))

    def _stderr_tail(self) -> str | None:
        """The line of the workload's stderr that names its error (as ``record --json`` reads
        it from the file)."""
        return step_facts.error_line(
            e.message for e in self._logs if e.data.get("stream") == "stderr"
        )

    def _publish(self) -> None:
        cb = self._on_snapshot
        if cb is None:
            # nobody watches (record): still judge, so the session keeps its verdict markers
            now = time.time()
            if now - self._judged_at >= JUDGE_UNWATCHED_S:
                self._judged_at = now
                self._judge_now(now)
            return
        try:
            cb(self.snapshot())
        except Exception as exc:  # the UI going away must not stop recording
            self._events.append(Event(time.time(), "ui-error", f"snapshot delivery failed: {exc}"))


def _measured(v: Verdict) -> int:
    """How many measurements a verdict quotes."""
    ev = v.evidence
    return len(ev.measured) if isinstance(ev, ProcessEvidence) and ev.measured else 0


def _rank_of(v: Verdict) -> int | None:
    """The rank a cross-rank verdict names (its straggler; None: none)."""
    return v.evidence.rank if isinstance(v.evidence, StragglerEvidence) else None


def session_file(path: str | None, name: str) -> Path:
    """The session path from ``-o`` or a fresh default one."""
    from sofa_top.recording.store import default_session_path

    return Path(path).expanduser() if path else default_session_path(name)
