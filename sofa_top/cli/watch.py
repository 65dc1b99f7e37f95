"""The commands that open the live dashboard: ``attach``, ``launch``, ``demo`` and the home
screen (``sofa-top`` alone)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from sofa_top.cli import exits
from sofa_top.cli.failures import failed, thread_failures
from sofa_top.cli.parser import metrics_of, sampling_of
from sofa_top.datamodel.errors import UserError
from sofa_top.launch import AttachRequest, LaunchRequest, Run, Sampling, open_attach, open_launch


def attach(args: argparse.Namespace) -> int:
    """``sofa-top attach PID``."""
    req = AttachRequest(
        pid=args.pid,
        output=args.output,
        sampling=sampling_of(args),
        inject=not args.no_inject,
        inject_timeout_s=args.inject_timeout,
        metrics=metrics_of(args),
    )
    return dashboard(opened_attach(req))


def opened_attach(req: AttachRequest) -> Run:
    """``open_attach`` and one line on stderr saying whether the agent is in the target."""
    run = open_attach(req)
    say_injection(run)
    return run


def say_injection(run: Run) -> None:
    """One line on stderr: the agent was injected (and what it cost), or why it was not."""
    r = run.injection
    if r is None or r.status == "disabled":
        return
    pid = run.target.pid
    if r.status == "injected":
        cost = f", injector {r.injector_s * 1e3:.0f} ms" if r.injector_s is not None else ""
        print(f"agent injected into PID {pid} ({r.python}{cost})", file=sys.stderr)
    else:
        # information, not an error: the session goes on from outside ("sofa-top:" lines are
        # the problems)
        print(
            f"no agent in PID {pid}: {r.reason}; recording from outside (--no-inject skips trying)",
            file=sys.stderr,
        )


def launch(args: argparse.Namespace) -> int:
    """``sofa-top launch -- CMD``."""
    return dashboard(open_launch(launch_request(args)), args.keep_running)


def launch_request(args: argparse.Namespace) -> LaunchRequest:
    """What ``sofa-top launch`` asks for (in a terminal or, with ``--web``, in a browser)."""
    if not args.cmd:
        raise UserError("launch needs a command: sofa-top launch -- python train.py")
    return LaunchRequest(
        cmd=tuple(args.cmd),
        name=args.name,
        output=args.output,
        sampling=sampling_of(args),
        metrics=metrics_of(args),
    )


def demo(args: argparse.Namespace) -> int:
    """``sofa-top demo [tf|torch]``: a bundled input-bound workload under the dashboard."""
    from sofa_top.demos import DEMOS

    need_framework(args.framework)
    cmd = [sys.executable, str(DEMOS[args.framework])]
    if args.seconds:
        cmd += ["--seconds", str(args.seconds)]
    if args.storage_ms is not None:
        if args.storage_ms < 0:
            raise UserError("--storage-ms must be 0 or more")
        # no storage latency: decode harder, so the input stage stays the bottleneck on CPU
        iters = {"tf": "40", "torch": "12"}[args.framework] if args.storage_ms == 0 else None
        cmd += ["--storage-ms", str(args.storage_ms)]
        cmd += ["--decode-iters", iters] if iters else []
    req = LaunchRequest(
        cmd=tuple(cmd),
        name=f"demo-{args.framework}",
        output=args.output,
        sampling=sampling_of(args),
    )
    return dashboard(open_launch(req), args.keep_running)


def need_framework(framework: str) -> None:
    """A demo needs its framework in sofa-top's own environment (its extra)."""
    import importlib.util

    module, name = {"tf": ("tensorflow", "TensorFlow"), "torch": ("torch", "PyTorch")}[framework]
    if importlib.util.find_spec(module) is None:
        raise UserError(
            f"the {framework} demo needs {name} beside sofa-top: "
            f"pip install 'sofa-top[{framework}]'"
        )


def dashboard(run: Run, keep_running: bool = False) -> int:
    """Show ``run`` in the dashboard until the user quits (or a signal ends it); then stop it
    and say where it is (``finished``)."""
    run.keep_running = keep_running
    # until the dashboard takes them over (its import takes a moment): a closed terminal
    # still ends the job, not sofa-top alone
    for sig in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: _signalled(run, signum))
    from sofa_top.tui.app import run_dashboard

    try:
        path = run_dashboard(run)
    finally:
        run.finish("user quit")
    return finished(run, path)


def _signalled(run: Run, signum: int) -> None:
    threading.Thread(target=run.signalled, args=(signal.Signals(signum).name,)).start()


def finished(run: Run, path: str | None = None) -> int:
    """After a run ends (in the terminal or a browser): say where its session is; the exit
    status."""
    print(f"session saved: {path or run.session.session_path}")
    running = left_running(run)
    if running:
        print(f"sofa-top: {running}", file=sys.stderr)
    if failed(run.session):
        print(
            f"sofa-top: recording stopped early ({thread_failures(run.session)})", file=sys.stderr
        )
        return exits.RECORDING_FAILED
    if run.cut is not None:
        print(f"sofa-top: {run.cut}", file=sys.stderr)
        return exits.SESSION_CUT
    if run.ended_by is not None:
        return exits.signal_status(run.ended_by) or 1
    session = run.session
    if session.target_exited and not session.job_stopped:
        return exits.workload_status(session.exit_code)
    return 0


def left_running(run: Run) -> str:
    """What to say of a launched workload that sofa-top left running ("" when none is)."""
    if run.left_running is None:
        return ""
    where = f"; its output goes on to {run.output_dir}" if run.output_dir is not None else ""
    return f"the workload (PID {run.left_running}) keeps running{where}"


def home() -> int:
    """``sofa-top`` alone: pick a process to attach to, type a command to launch, or replay."""
    from sofa_top.cli.saved import replay_path
    from sofa_top.tui.home import run_home

    choice = run_home()
    if choice is None:
        return 0
    if choice.action == "attach" and choice.pid is not None:
        return dashboard(opened_attach(AttachRequest(pid=choice.pid, sampling=Sampling())))
    if choice.action == "launch" and choice.argv:
        return dashboard(open_launch(LaunchRequest(cmd=tuple(choice.argv))))
    if choice.action == "replay" and choice.path is not None:
        return replay_path(str(choice.path))
    return 0
