"""Open a recording on a target: launch a command under the in-process agent, or attach to a
running PID. The CLI, ``compare`` and the TUI all come through here.

A request says what to watch and how (``LaunchRequest``, ``AttachRequest``); ``open_launch`` /
``open_attach`` build the collectors, the session file and the hub and return a ``Run``, which
is a ``SnapshotSource`` (``start`` / ``stop``) plus, in launch mode, the workload's process.
Nothing starts collecting until ``Run.start``. With ``metrics`` set, the Prometheus port is
bound first of all (a port in use stops everything before it starts) and every snapshot also
goes to the exporter.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sofa_top.agent.launch_env import agent_env
from sofa_top.collectors.agent import AgentCollector, AgentServer
from sofa_top.collectors.base import Collector, Emit
from sofa_top.collectors.gpu import GpuCollector
from sofa_top.collectors.inject import DEFAULT_TIMEOUT_S, InjectResult, agent_uids, inject
from sofa_top.collectors.logs import LogCollector
from sofa_top.collectors.process import ProcessCollector, describe_pid
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import Event
from sofa_top.datamodel.snapshot import Mode, Snapshot, TargetInfo
from sofa_top.datamodel.source import OnSnapshot
from sofa_top.metrics.spec import MetricsSpec
from sofa_top.recording.hub import CUT_GRACE_S, FINALIZE_S, Session, session_file
from sofa_top.recording.store import SessionStore

if TYPE_CHECKING:
    from sofa_top.metrics.exporter import MetricsExporter

DEFAULT_INTERVAL_S = 0.1
DEFAULT_STACK_RATE_HZ = 100.0
DEFAULT_INJECT_TIMEOUT_S = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class Sampling:
    """How often the collectors sample."""

    interval_s: float = DEFAULT_INTERVAL_S  # process/system
    stack_rate_hz: float = DEFAULT_STACK_RATE_HZ  # py-spy (adapts down to a CPU budget)
    stacks: bool = True  # False: no py-spy at all


@dataclass(frozen=True)
class LaunchRequest:
    """Start ``cmd`` as a child with the agent injected and record it."""

    cmd: tuple[str, ...]
    mode: Mode = "launch"
    name: str | None = None  # session name (default: the command's basename)
    output: str | None = None  # session file (default: a fresh one in the sessions directory)
    sampling: Sampling = Sampling()
    # the agent's settings (``sofa_top.agent.settings``), e.g. {"optimize": spec.to_json()}
    settings: Mapping[str, object] = field(default_factory=dict)
    cwd: str | None = None  # default: sofa-top's own working directory
    env: Mapping[str, str] | None = None  # the base environment (default: sofa-top's own)
    metrics: MetricsSpec | None = None  # serve /metrics for Prometheus (off by default)
    # more session metadata: ``compare`` marks a run of a comparison (its group, its run)
    meta: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class AttachRequest:
    """Record a process that is already running (with the agent injected, when it can be)."""

    pid: int
    mode: Mode = "attach"
    output: str | None = None
    sampling: Sampling = Sampling()
    inject: bool = True  # False: outside only (--no-inject): py-spy, /proc and NVML
    inject_timeout_s: float = DEFAULT_INJECT_TIMEOUT_S  # the most the injection may wait
    metrics: MetricsSpec | None = None  # serve /metrics for Prometheus (off by default)
    name: str | None = None  # session name (default: the process name and PID)


class Run:
    """A session plus, in launch mode, the workload sofa-top started and its agent server."""

    def __init__(
        self,
        session: Session,
        popen: subprocess.Popen[bytes] | None = None,
        server: AgentServer | None = None,
        output_dir: Path | None = None,
        exporter: MetricsExporter | None = None,
    ) -> None:
        self.session = session
        self.popen = popen
        self.server = server
        self.output_dir = output_dir
        self.exporter = exporter
        self.session_path = session.session_path
        self.target = session.target
        self.injection: InjectResult | None = None  # attach mode: what injecting the agent did
        self.left_running: int | None = None  # the PID of a workload left running at the end
        self.keep_running = False  # --keep-running: a signal that ends sofa-top leaves the job
        self.ended_by: str | None = None  # the signal that ended sofa-top (SIGHUP, SIGTERM)
        self._finish_lock = threading.Lock()

    def start(self, on_snapshot: OnSnapshot | None = None) -> None:
        """SnapshotSource: start the session (its snapshots also feed the metrics exporter)."""
        exporter = self.exporter
        if exporter is None:
            self.session.start(on_snapshot)
            return

        def both(snapshot: Snapshot) -> None:
            exporter.update(snapshot)
            if on_snapshot is not None:
                on_snapshot(snapshot)

        self.session.start(both)

    def stop(self) -> None:
        """SnapshotSource: the user quit the dashboard (and confirmed stopping a launch)."""
        self.finish("user quit")

    def detach(self) -> None:
        """The quit dialog's "detach": finalize the session and leave the workload running."""
        self.finish("user detached", stop_job=False)

    def signalled(self, name: str) -> None:
        """A signal ends sofa-top (SIGHUP: its terminal closed): stop the workload as the quit
        dialog's "stop" does, or leave it running with ``keep_running``. Then sofa-top ends
        within ``SIGNAL_EXIT_S``, drawn or not: a closed terminal may never let the dashboard
        draw its way out, and the session is final, the job handled."""
        self.ended_by = self.ended_by or name
        self.finish(name, stop_job=not self.keep_running)
        code = 128 + int(signal.Signals[name])
        watchdog = threading.Timer(SIGNAL_EXIT_S, os._exit, (code,))
        watchdog.daemon = True  # a normal exit comes first and does not wait for it
        watchdog.start()

    @property
    def cut(self) -> str | None:
        """What the session file lacks when its end passed its bound (``Session.stop``)."""
        return self.session.cut

    def finish(self, reason: str, *, stop_job: bool = True, interrupt: bool = True) -> None:
        """Stop the workload sofa-top launched (if still running), then the session; returns
        once the session is final (its `ended` record and final verdict stored), or cut at its
        bound (``cut`` says what it lacks): within ``FINISH_BOUND_S`` in all.

        ``interrupt``: SIGINT first, as Ctrl-C would (the job may save its work), then SIGTERM,
        then SIGKILL (``terminate_workload``); else SIGTERM first. ``stop_job=False`` leaves it
        running (detach, ``--keep-running``): its output goes on to ``output_dir``, kept."""
        with self._finish_lock:  # a SIGHUP may come while the dashboard's quit is finishing
            self._finish(reason, stop_job, interrupt)

    def _finish(self, reason: str, stop_job: bool, interrupt: bool) -> None:
        if self.popen is not None and self.popen.poll() is None:
            if stop_job:
                # The session ends for the user's reason (q, Ctrl-C, SIGTERM), not "target
                # exited": the workload exits below because sofa-top stops it.
                self.session.stopping_job(reason)
                terminate_workload(self.popen, interrupt=interrupt)
                # Let the process collector see the exit, so the session records its code.
                self.session.wait(EXIT_SEEN_S)
            else:
                self.left_running = self.popen.pid
                self.popen = None
        self.session.stop(reason)
        if self.exporter is not None:
            self.exporter.close()
        if self.server is not None:
            self.server.close()
        if self.output_dir is not None and self.left_running is None:
            # The session holds the (bounded) output now.
            shutil.rmtree(self.output_dir, ignore_errors=True)


SIGNAL_EXIT_S = 5.0  # after a signal's stop: the most the dashboard may take to exit
INTERRUPT_GRACE_S = 5.0  # after SIGINT: a training script may save a checkpoint
TERMINATE_GRACE_S = 5.0  # after SIGTERM, before SIGKILL
EXIT_SEEN_S = 2.0  # after the job's exit: the process collector records it (and its code)
# The most ``Run.finish`` takes: the job's stop (SIGINT, SIGTERM, then SIGKILL), its exit seen,
# then the session's end (``Session.stop``: FINALIZE_S, and CUT_GRACE_S when that is passed).
# Only a job that SIGKILL cannot end (a process in uninterruptible sleep) holds it longer.
FINISH_BOUND_S = INTERRUPT_GRACE_S + TERMINATE_GRACE_S + EXIT_SEEN_S + FINALIZE_S + CUT_GRACE_S


def terminate_workload(
    popen: subprocess.Popen[bytes],
    *,
    interrupt: bool = True,
    interrupt_s: float = INTERRUPT_GRACE_S,
    grace_s: float = TERMINATE_GRACE_S,
) -> None:
    """Stop the workload's process group: SIGINT (with ``interrupt``), then SIGTERM after
    ``interrupt_s``, then SIGKILL after ``grace_s``. Returns once the workload has exited and
    no process of its group is left (a DataLoader worker, a rank)."""
    group = popen.pid
    steps = ([(signal.SIGINT, interrupt_s)] if interrupt else []) + [(signal.SIGTERM, grace_s)]
    for sig, wait_s in steps:
        if not _group_alive(popen, group):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(popen, group):
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    popen.wait()


def _group_alive(popen: subprocess.Popen[bytes], group: int) -> bool:
    """Whether the workload or any process of its group is still there (the workload is
    reaped here, so that its zombie does not count)."""
    if popen.poll() is None:
        return True
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _collectors(
    sampling: Sampling, pid: int, popen: subprocess.Popen[bytes] | None
) -> list[Collector]:
    process = ProcessCollector(pid, interval=sampling.interval_s, popen=popen)
    collectors: list[Collector] = [process, GpuCollector(process.tree_pids)]
    if sampling.stacks:
        from sofa_top.collectors.stacks import StackCollector

        collectors.append(StackCollector(pid, rate_hz=sampling.stack_rate_hz))
    return collectors


def _exporter(spec: MetricsSpec | None, run: str) -> MetricsExporter | None:
    if spec is None:
        return None
    # prometheus_client only when asked for: record and compare run without it (the GPU
    # machine's wheels do not include it)
    from sofa_top.metrics.exporter import MetricsExporter

    return MetricsExporter(spec, run)


def open_attach(req: AttachRequest) -> Run:
    """A session on the running process ``req.pid`` (raises UserError for a bad PID or a
    metrics port in use). With
    ``req.inject`` the agent is injected when it can be; otherwise (a second concurrent attach
    included: the target's agent refuses it) the session records from outside and an event
    says why."""
    info = describe_pid(req.pid)
    target = TargetInfo(pid=info.pid, name=info.name, cmdline=info.cmdline or (info.name,))
    name = req.name or f"{target.name}-{target.pid}"
    exporter = _exporter(req.metrics, name)
    try:
        store = SessionStore(session_file(req.output, name))
    except UserError:
        if exporter is not None:
            exporter.close()
        raise
    collectors = _collectors(req.sampling, target.pid, None)
    server: AgentServer | None = None
    result = InjectResult("disabled", "--no-inject: recording from outside only")
    if req.inject:
        try:
            server, result = _inject(target.pid, req.inject_timeout_s)
        except UserError:
            discard(store)
            if exporter is not None:
                exporter.close()
            raise
    if server is not None and result.handshake is not None:
        uids = agent_uids(target.pid)
        collectors.append(AgentCollector(server, allowed_uids=uids, handshake=result.handshake))
    else:
        collectors.append(_Note(result))
    meta = {"name": name, "inject": {"status": result.status, "reason": result.reason}}
    session = Session(target, collectors, store, mode=req.mode, extra_meta=meta)
    run = Run(session, server=server, exporter=exporter)
    run.injection = result
    return run


def _uid_of(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _inject(pid: int, timeout_s: float) -> tuple[AgentServer | None, InjectResult]:
    uid = _uid_of(pid)
    server = AgentServer(owner_uid=uid if os.geteuid() == 0 else None)
    result = inject(pid, server, "{}", timeout_s)
    if result.status != "injected":
        server.close()
        return None, result
    return server, result


class _Note:
    """Records once why the agent is missing from an attached session (it emits one Event)."""

    name = "inject"

    def __init__(self, result: InjectResult) -> None:
        self._result = result

    def run(self, emit: Emit, stop: threading.Event) -> None:
        """Emit the injection's outcome and return."""
        r = self._result
        emit(
            Event(
                time.time(),
                "agent-error",
                f"no agent in the target: {r.reason}",
                {"inject": r.status, "reason": r.reason},
            )
        )


def open_launch(req: LaunchRequest) -> Run:
    """Start ``req.cmd`` with the agent and a session on it (raises UserError when the command
    cannot start or the session cannot be recorded: then nothing is left running)."""
    cmd = list(req.cmd)
    if not cmd:
        raise UserError("launch needs a command: sofa-top launch -- python train.py")
    name = req.name or os.path.basename(cmd[0])
    path = session_file(req.output, name)
    # The metrics port and the session file first: a command must never start (only to be
    # stopped again) because sofa-top then finds that it cannot serve or record.
    exporter = _exporter(req.metrics, name)
    try:
        store = SessionStore(path)
    except UserError:
        if exporter is not None:
            exporter.close()
        raise
    try:
        server = AgentServer()
    except UserError:
        discard(store)
        if exporter is not None:
            exporter.close()
        raise
    settings = dict(req.settings)
    base = os.environ if req.env is None else req.env
    env = {**base, **agent_env(server.socket_path, settings, base)}
    # Files, not pipes: if sofa-top dies, the workload's next print must not get SIGPIPE.
    out_dir = Path(tempfile.mkdtemp(prefix="sofa-top-output-"))
    outputs = {"stdout": out_dir / "stdout.log", "stderr": out_dir / "stderr.log"}
    try:
        popen = _start(cmd, outputs, env, req.cwd)
    except OSError as exc:
        server.close()
        shutil.rmtree(out_dir, ignore_errors=True)
        discard(store)
        if exporter is not None:
            exporter.close()
        if isinstance(exc, FileNotFoundError):
            raise UserError(f"command not found: {cmd[0]}") from None
        raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    target = TargetInfo(pid=popen.pid, name=name, cmdline=tuple(cmd), launched=True)
    collectors = _collectors(req.sampling, popen.pid, popen)
    collectors += [AgentCollector(server), LogCollector(outputs)]
    meta = {**req.meta, "settings": settings, "name": name}
    session = Session(target, collectors, store, mode=req.mode, extra_meta=meta)
    return Run(session, popen, server, out_dir, exporter)


def _start(
    cmd: Sequence[str], outputs: Mapping[str, Path], env: Mapping[str, str], cwd: str | None
) -> subprocess.Popen[bytes]:
    with outputs["stdout"].open("wb") as out, outputs["stderr"].open("wb") as err:
        # A new session: the terminal's Ctrl-C reaches sofa-top, which decides what to stop.
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def discard(store: SessionStore) -> None:
    """Close and delete a session file that never recorded anything."""
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
