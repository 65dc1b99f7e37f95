"""The ``sofa-top`` command line.

Every user-facing failure is a ``UserError``: one line on stderr, a non-zero exit, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from sofa_top import __version__
from sofa_top.model.errors import UserError

if TYPE_CHECKING:
    from sofa_top.collectors.agent import AgentServer
    from sofa_top.collectors.base import Collector
    from sofa_top.model.source import OnSnapshot
    from sofa_top.recording.hub import Session
    from sofa_top.recording.store import SessionStore

DEFAULT_INTERVAL_S = 0.1
DEFAULT_STACK_RATE_HZ = 100.0


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"sofa-top: error: {message} (see '{self.prog} --help')\n")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return v


def _pid(text: str) -> int:
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands: attach, record, doctor)."""
    p = _Parser(
        prog="sofa-top",
        description="Live terminal profiler for deep-learning workloads.",
    )
    p.add_argument("--version", action="version", version=f"sofa-top {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def sampling(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--interval",
            type=_positive_float,
            default=DEFAULT_INTERVAL_S,
            metavar="S",
            help=f"process/system sampling interval in seconds (default {DEFAULT_INTERVAL_S})",
        )
        sp.add_argument(
            "--stack-rate",
            type=_positive_float,
            default=DEFAULT_STACK_RATE_HZ,
            metavar="HZ",
            help="Python stack sampling rate; adapts down to stay within a CPU budget "
            f"(default {DEFAULT_STACK_RATE_HZ:g})",
        )
        sp.add_argument(
            "--no-stacks", action="store_true", help="do not sample Python stacks (no py-spy)"
        )
        sp.add_argument("-o", "--output", metavar="FILE", help="session file to write")

    a = sub.add_parser("attach", help="attach to a running process and open the live dashboard")
    a.add_argument("pid", type=_pid, metavar="PID")
    sampling(a)

    r = sub.add_parser(
        "record",
        help="record headless (no screen): --pid PID, or -- CMD to launch",
        usage="sofa-top record (--pid PID | -- CMD [ARGS...]) [options]",
    )
    r.add_argument("--pid", type=_pid, metavar="PID")
    r.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds")
    r.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    sampling(r)

    la = sub.add_parser(
        "launch",
        help="start CMD with the in-process agent and open the dashboard",
        usage="sofa-top launch [--name N] [-o FILE] -- CMD [ARGS...]",
    )
    la.add_argument("--name", help="session name (default: the command)")
    sampling(la)

    d = sub.add_parser("demo", help="run a bundled input-bound workload under sofa-top")
    d.add_argument("framework", nargs="?", choices=("tf", "torch"), default="tf")
    d.add_argument("--seconds", type=_positive_float, metavar="S", help="stop the demo after S s")
    d.add_argument(
        "--storage-ms",
        type=float,
        metavar="MS",
        help="simulated per-file storage latency (default 4; 0: a CPU-bound input stage)",
    )
    sampling(d)

    e = sub.add_parser(
        "export", help="export a session for Perfetto, chrome://tracing or speedscope"
    )
    e.add_argument("session", metavar="SESSION", help="session file, name, or 'last'")
    e.add_argument(
        "--format", "-f", choices=("perfetto", "chrome", "speedscope"), default="perfetto"
    )
    e.add_argument(
        "-o", "--output", metavar="OUT", help="output file (default: beside the session)"
    )

    rp = sub.add_parser("replay", help="open a saved session read-only with a time cursor")
    rp.add_argument("session", metavar="SESSION", help="session file, name, or 'last'")

    ss = sub.add_parser("sessions", help="list saved sessions")
    ss.add_argument("--json", action="store_true", help="machine-readable list")
    ss.add_argument(
        "--prune",
        type=_positive_float,
        metavar="DAYS",
        help="delete sessions older than DAYS (asks first)",
    )
    ss.add_argument("--yes", action="store_true", help="with --prune: do not ask")

    sub.add_parser("doctor", help="check what sofa-top can see on this machine")

    from sofa_top.optimizers.compare import add_compare_parser

    add_compare_parser(sub)
    return p


# Uncaught exceptions of sofa-top's own background threads, one line each (see main).
_THREAD_FAILURES: list[str] = []


def _on_thread_failure(failure: threading.ExceptHookArgs) -> None:
    """Keep a background thread's death as one line for the end of the command, rather than a
    traceback in the middle of the output (or of the dashboard)."""
    name = failure.thread.name if failure.thread is not None else "a thread"
    _THREAD_FAILURES.append(f"{name} failed: {failure.exc_type.__name__}: {failure.exc_value}")


def _thread_failures(session: Session | None = None) -> str:
    """Why recording stopped early: the session's own account first, then dead threads."""
    whys = [session.failure] if session is not None and session.failure else []
    whys += _THREAD_FAILURES
    return "; ".join(whys) or "the session ended unexpectedly"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sofa-top`` console script."""
    threading.excepthook = _on_thread_failure
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is the workload's command line, untouched by argparse.
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    parser = build_parser()
    args = parser.parse_args(argv)
    args.cmd = cmd
    try:
        if cmd and args.command not in ("launch", "record", "compare"):
            raise UserError(f"'{args.command or 'sofa-top'}' takes no command after --")
        if args.command == "attach":
            return _attach(args)
        if args.command == "record":
            return _record(args)
        if args.command == "launch":
            if not cmd:
                raise UserError("launch needs a command: sofa-top launch -- python train.py")
            return _launch(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "export":
            return _export(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "sessions":
            return _sessions(args)
        if args.command == "compare":
            from sofa_top.optimizers.compare import compare_main

            return compare_main(args)
        if args.command == "doctor":
            from sofa_top.cli.doctor import main as doctor_main

            return doctor_main()
        return _home(args)
    except UserError as exc:
        print(f"sofa-top: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


class _Run:
    """A session plus, in launch mode, the workload sofa-top started and its agent server."""

    def __init__(
        self,
        session: Session,
        popen: subprocess.Popen[bytes] | None = None,
        server: AgentServer | None = None,
        output_dir: Path | None = None,
    ) -> None:
        self.session = session
        self.popen = popen
        self.server = server
        self.output_dir = output_dir
        self.session_path = session.session_path
        self.target = session.target

    def start(self, on_snapshot: OnSnapshot | None = None) -> None:
        """SnapshotSource: start the session."""
        self.session.start(on_snapshot)

    def stop(self) -> None:
        """SnapshotSource: the user quit the dashboard (and confirmed stopping a launch)."""
        self.finish("user quit")

    def finish(self, reason: str) -> None:
        """Stop the workload sofa-top launched (if still running), then the session."""
        if self.popen is not None and self.popen.poll() is None:
            # The session ends for the user's reason (q, Ctrl-C, SIGTERM), not "target exited":
            # the workload exits below because sofa-top stops it.
            self.session.end_reason = self.session.end_reason or reason
            terminate_workload(self.popen)
            # Let the process collector see the exit, so the session records its code.
            self.session.wait(2.0)
        self.session.stop(reason)
        if self.server is not None:
            self.server.close()
        if self.output_dir is not None:
            # The session holds the (bounded) output now.
            shutil.rmtree(self.output_dir, ignore_errors=True)


def terminate_workload(popen: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM the workload's process group, then SIGKILL it after ``grace_s``."""
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def _collectors(
    args: argparse.Namespace, pid: int, popen: subprocess.Popen[bytes] | None
) -> list[Collector]:
    from sofa_top.collectors.gpu import GpuCollector
    from sofa_top.collectors.process import ProcessCollector

    process = ProcessCollector(pid, interval=args.interval, popen=popen)
    collectors: list[Collector] = [process, GpuCollector(process.tree_pids)]
    if not args.no_stacks:
        from sofa_top.collectors.stacks import StackCollector

        collectors.append(StackCollector(pid, rate_hz=args.stack_rate))
    return collectors


def _open_attach(args: argparse.Namespace, mode: str) -> _Run:
    from sofa_top.collectors.process import describe_pid
    from sofa_top.model.snapshot import TargetInfo
    from sofa_top.recording.hub import Session, session_file
    from sofa_top.recording.store import SessionStore

    info = describe_pid(args.pid)
    target = TargetInfo(pid=info.pid, name=info.name, cmdline=info.cmdline or (info.name,))
    store = SessionStore(session_file(args.output, f"{target.name}-{target.pid}"))
    return _Run(Session(target, _collectors(args, target.pid, None), store, mode=mode))


def _open_launch(
    args: argparse.Namespace, mode: str, settings: dict[str, object] | None = None
) -> _Run:
    from sofa_top.agent.launch_env import agent_env
    from sofa_top.collectors.agent import AgentCollector, AgentServer
    from sofa_top.collectors.logs import LogCollector
    from sofa_top.model.snapshot import TargetInfo
    from sofa_top.recording.hub import Session, session_file
    from sofa_top.recording.store import SessionStore

    cmd: list[str] = args.cmd
    name = getattr(args, "name", None) or os.path.basename(cmd[0])
    path = session_file(args.output, name)
    # The session file first: a command must never start (only to be stopped again) because
    # sofa-top then finds that it cannot record.
    store = SessionStore(path)
    try:
        server = AgentServer()
    except UserError:
        _discard(store)
        raise
    env = {**os.environ, **agent_env(server.socket_path, settings or {})}
    # Files, not pipes: if sofa-top dies, the workload's next print must not get SIGPIPE.
    out_dir = Path(tempfile.mkdtemp(prefix="sofa-top-output-"))
    outputs = {"stdout": out_dir / "stdout.log", "stderr": out_dir / "stderr.log"}
    try:
        with outputs["stdout"].open("wb") as out, outputs["stderr"].open("wb") as err:
            # A new session: the terminal's Ctrl-C reaches sofa-top, which decides what to stop.
            popen = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        server.close()
        shutil.rmtree(out_dir, ignore_errors=True)
        _discard(store)
        if isinstance(exc, FileNotFoundError):
            raise UserError(f"command not found: {cmd[0]}") from None
        raise UserError(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
    target = TargetInfo(pid=popen.pid, name=name, cmdline=tuple(cmd), launched=True)
    collectors = _collectors(args, popen.pid, popen)
    collectors += [
        AgentCollector(server),
        LogCollector(outputs),
    ]
    session = Session(target, collectors, store, mode=mode, extra_meta={"settings": settings or {}})
    return _Run(session, popen, server, out_dir)


def _discard(store: SessionStore) -> None:
    """Close and delete a session file that never recorded anything."""
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)


def _attach(args: argparse.Namespace) -> int:
    return _dashboard(_open_attach(args, "attach"))


def _launch(args: argparse.Namespace) -> int:
    return _dashboard(_open_launch(args, "launch"))


def _demo(args: argparse.Namespace) -> int:
    from sofa_top.demos import DEMOS

    args.cmd = [sys.executable, str(DEMOS[args.framework])]
    if args.seconds:
        args.cmd += ["--seconds", str(args.seconds)]
    if args.storage_ms is not None:
        if args.storage_ms < 0:
            raise UserError("--storage-ms must be 0 or more")
        # no storage latency: decode harder, so the input stage stays the bottleneck on CPU
        iters = {"tf": "40", "torch": "12"}[args.framework] if args.storage_ms == 0 else None
        args.cmd += ["--storage-ms", str(args.storage_ms)]
        args.cmd += ["--decode-iters", iters] if iters else []
    args.name = f"demo-{args.framework}"
    return _dashboard(_open_launch(args, "launch"))


def _dashboard(run: _Run) -> int:
    from sofa_top.tui.app import run_dashboard

    try:
        path = run_dashboard(run)
    finally:
        run.finish("user quit")
    print(f"session saved: {path or run.session.session_path}")
    if _THREAD_FAILURES or run.session.failure:
        why = _thread_failures(run.session)
        print(f"sofa-top: recording stopped early ({why})", file=sys.stderr)
        return 1
    return 0


def _record(args: argparse.Namespace) -> int:
    if (args.pid is None) == (not args.cmd):
        raise UserError("record needs either --pid PID or -- CMD [ARGS...] (not both)")
    run = _open_launch(args, "record") if args.cmd else _open_attach(args, "record")
    session = run.session
    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_reason.append(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    session.start()
    deadline = time.monotonic() + args.duration if args.duration else None
    if not args.json:
        what = f"PID {session.target.pid}"
        print(f"recording {what} to {session.session_path} (Ctrl-C stops)", file=sys.stderr)
    while not session.done and not stop_reason:
        if deadline is not None and time.monotonic() >= deadline:
            stop_reason.append("duration reached")
            break
        session.wait(0.2)  # short waits keep signal handling responsive
    # Neither asked to stop nor the target's exit: sofa-top itself failed (a full disk, ...).
    failed = not stop_reason and not session.target_exited
    reason = stop_reason[0] if stop_reason else "recording failed" if failed else "target exited"
    left_running = None
    if failed and run.popen is not None and run.popen.poll() is None:
        # sofa-top failing is no reason to stop the user's workload: it runs on, unwatched.
        left_running, run.popen = run.popen.pid, None
    finisher = threading.Thread(target=run.finish, args=(reason,), daemon=True)
    finisher.start()
    finisher.join(30.0)
    from sofa_top.recording.report import render_summary, session_summary

    summary = session_summary(session.session_path)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_summary(summary)
    if failed:
        running = f"; the workload (PID {left_running}) keeps running" if left_running else ""
        print(
            f"sofa-top: recording stopped early ({_thread_failures(session)}); "
            f"{session.session_path} keeps what was recorded until then{running}",
            file=sys.stderr,
        )
        return 1
    return 0


def resolve_session(text: str) -> Path:
    """A session given as a path, a file name in the sessions directory, or ``last``."""
    from sofa_top.recording.paths import sessions_dir

    path = Path(text).expanduser()
    if path.is_file():
        return path
    root = sessions_dir()
    if text == "last":
        candidates = sorted(root.glob("*.sofa"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            raise UserError(f"no saved sessions in {root}")
        return candidates[-1]
    matches = sorted(root.glob(f"{text}*.sofa")) if "/" not in text else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise UserError(f"'{text}' matches {len(matches)} sessions; give more of the name")
    raise UserError(f"no such session: {text}")


def _export(args: argparse.Namespace) -> int:
    from sofa_top.export import export_session

    out = Path(args.output).expanduser() if args.output else None
    path = resolve_session(args.session)
    _check_intact(path)
    result = export_session(path, args.format, out)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"{result.path} ({args.format}, {result.events} events, {result.seconds:.2f} s)")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from sofa_top.recording.replay import ReplaySource
    from sofa_top.tui.app import run_dashboard

    path = resolve_session(args.session)
    _check_intact(path)
    run_dashboard(ReplaySource(path))
    return 0


def _check_intact(path: Path) -> None:
    """Refuse a session file that is not a session, or has damaged pages."""
    from sofa_top.recording.store import SessionReader

    reader = SessionReader(path)
    try:
        reader.check_intact()
    finally:
        reader.close()


def _sessions(args: argparse.Namespace) -> int:
    from sofa_top.recording.catalogue import list_sessions, prune, render_sessions, sessions_json

    if args.prune is not None:

        def confirm(question: str) -> bool:
            if args.yes:
                return True
            if not sys.stdin.isatty():
                raise UserError("--prune asks for confirmation: run it in a terminal or add --yes")
            return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

        n = prune(args.prune, confirm)
        print(f"deleted {n} session(s)")
        return 0
    sessions = list_sessions()
    if args.json:
        json.dump(sessions_json(sessions), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_sessions(sessions)
    return 0


def _home(args: argparse.Namespace) -> int:
    """``sofa-top`` alone: pick a process to attach to, type a command to launch, or replay."""
    from sofa_top.tui.home import run_home

    choice = run_home()
    if choice is None:
        return 0
    for name, default in (
        ("interval", DEFAULT_INTERVAL_S),
        ("stack_rate", DEFAULT_STACK_RATE_HZ),
        ("no_stacks", False),
        ("output", None),
        ("name", None),
    ):
        setattr(args, name, default)
    if choice.action == "attach" and choice.pid is not None:
        args.pid = choice.pid
        return _attach(args)
    if choice.action == "launch" and choice.argv:
        args.cmd = list(choice.argv)
        return _launch(args)
    if choice.action == "replay" and choice.path is not None:
        args.session = str(choice.path)
        return _replay(args)
    return 0
