"""The ``sofa-top`` command line.

Every user-facing failure is a ``UserError``: one line on stderr, a non-zero exit, no traceback.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from sofa_top import __version__
from sofa_top.errors import UserError

if TYPE_CHECKING:
    from sofa_top.session import Session

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

    r = sub.add_parser("record", help="record a process headless (no screen)")
    r.add_argument("--pid", type=_pid, required=True, metavar="PID")
    r.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds")
    r.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    sampling(r)

    d = sub.add_parser("demo", help="run a bundled input-bound workload under sofa-top")
    d.add_argument("framework", nargs="?", choices=("tf", "torch"), default="tf")
    d.add_argument("--seconds", type=_positive_float, metavar="S", help="stop the demo after S s")
    sampling(d)

    sub.add_parser("doctor", help="check what sofa-top can see on this machine")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sofa-top`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "attach":
            return _attach(args)
        if args.command == "record":
            return _record(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "doctor":
            from sofa_top.doctor import main as doctor_main

            return doctor_main()
        parser.print_help()
        return 0
    except UserError as exc:
        print(f"sofa-top: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _open_session(
    args: argparse.Namespace, mode: str, popen: subprocess.Popen[bytes] | None = None
) -> Session:
    from sofa_top.collector import Collector
    from sofa_top.collectors.gpu import GpuCollector
    from sofa_top.collectors.process import ProcessCollector
    from sofa_top.session import Session, session_file
    from sofa_top.store import SessionStore
    from sofa_top.target import resolve_pid, tree_pids

    target = resolve_pid(args.pid)
    if popen is not None:
        target = replace(target, launched=True)
    store = SessionStore(session_file(args.output, f"{target.name}-{target.pid}"))
    collectors: list[Collector] = [
        ProcessCollector(target.pid, interval=args.interval, popen=popen),
        GpuCollector(lambda: tree_pids(target.pid)),
    ]
    if not args.no_stacks:
        from sofa_top.collectors.stacks import StackCollector

        collectors.append(StackCollector(target.pid, rate_hz=args.stack_rate))
    return Session(target, collectors, store, mode=mode)


def _attach(args: argparse.Namespace) -> int:
    from sofa_top.tui.app import run_dashboard

    session = _open_session(args, "attach")
    path = run_dashboard(session)
    session.stop("user quit")
    print(f"session saved: {path or session.session_path}")
    return 0


def _record(args: argparse.Namespace) -> int:
    session = _open_session(args, "record")
    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_reason.append(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    session.start()
    deadline = time.monotonic() + args.duration if args.duration else None
    if not args.json:
        print(
            f"recording PID {args.pid} to {session.session_path} (Ctrl-C to stop)", file=sys.stderr
        )
    while not session.done and not stop_reason:
        if deadline is not None and time.monotonic() >= deadline:
            stop_reason.append("duration reached")
            break
        # Short waits keep signal handling responsive.
        session.wait(0.2)
    reason = stop_reason[0] if stop_reason else "target exited"
    threading.Thread(target=session.stop, args=(reason,), daemon=True).start()
    session.wait(10.0)
    from sofa_top.report import session_summary

    summary = session_summary(session.session_path)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from sofa_top.report import render_summary

        render_summary(summary)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from sofa_top.demos import DEMOS
    from sofa_top.tui.app import run_dashboard

    cmd = [sys.executable, str(DEMOS[args.framework])]
    if args.seconds:
        cmd += ["--seconds", str(args.seconds)]
    # The workload's output would scribble over the dashboard; keep it next to the session.
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the child writes it after this returns
        prefix="sofa-top-demo-", suffix=".log", delete=False
    )
    popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        args.pid = popen.pid
        session = _open_session(args, "demo", popen=popen)
        path = run_dashboard(session)
        session.stop("user quit")
    finally:
        if popen.poll() is None:
            popen.terminate()
            try:
                popen.wait(5)
            except subprocess.TimeoutExpired:
                popen.kill()
        log.close()
    print(f"session saved: {path or session.session_path} (workload output: {log.name})")
    return 0
