"""``sofa-top record``: the headless twin of the dashboard."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sofa_top.cli import exits
from sofa_top.cli.failures import thread_failures
from sofa_top.cli.parser import metrics_of, sampling_of
from sofa_top.cli.watch import left_running, opened_attach
from sofa_top.datamodel.errors import UserError
from sofa_top.launch import AttachRequest, LaunchRequest, open_launch


def record(args: argparse.Namespace) -> int:
    """Record until ``--duration``, the target's exit or Ctrl-C/SIGTERM/SIGHUP; then print the
    summary (``--json``: the machine-readable one). The exit status is the workload's when it
    ended by itself (128 + N: a signal), 128 + N when a signal stopped sofa-top (130: Ctrl-C),
    0 at ``--duration``, 1 when sofa-top itself failed or its session was cut at finalizing
    (``exits``)."""
    if (args.pid is None) == (not args.cmd):
        raise UserError("record needs either --pid PID or -- CMD [ARGS...] (not both)")
    sampling = sampling_of(args)
    metrics = metrics_of(args)
    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_reason.append(signal.Signals(signum).name)

    def catch_signals() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, on_signal)

    if args.cmd:
        # before the workload starts: a signal in between must not end sofa-top alone
        catch_signals()
        req = LaunchRequest(
            cmd=tuple(args.cmd),
            mode="record",
            name=args.name,
            output=args.output,
            sampling=sampling,
            metrics=metrics,
        )
        run = open_launch(req)
    else:
        attach = AttachRequest(
            pid=args.pid,
            mode="record",
            output=args.output,
            sampling=sampling,
            inject=not args.no_inject,
            inject_timeout_s=args.inject_timeout,
            metrics=metrics,
            name=args.name,
        )
        run = opened_attach(attach)  # (Ctrl-C during the injection still ends it at once)
        catch_signals()
    session = run.session
    run.start()
    deadline = time.monotonic() + args.duration if args.duration else None
    if not args.json:
        what = f"PID {session.target.pid}"
        print(f"recording {what} to {session.session_path} (Ctrl-C stops)", file=sys.stderr)
    if run.exporter is not None:
        print(f"serving metrics at {run.exporter.url}", file=sys.stderr)
    while not session.done and not stop_reason:
        if deadline is not None and time.monotonic() >= deadline:
            stop_reason.append("duration reached")
            break
        session.wait(0.2)  # short waits keep signal handling responsive
    # Neither asked to stop nor the target's exit: sofa-top itself failed (a full disk, ...).
    failed = not stop_reason and not session.target_exited
    reason = stop_reason[0] if stop_reason else "recording failed" if failed else "target exited"
    # sofa-top failing is no reason to stop the user's workload: it runs on, unwatched
    stop_job = not (failed or args.keep_running)
    # returns once the session is final, or cut at its bound (``launch.FINISH_BOUND_S``)
    run.finish(reason, stop_job=stop_job)
    running = left_running(run)
    if run.cut is not None:
        # no summary: judging the file again would take what the hub could not finish in time
        print(f"sofa-top: {run.cut}" + (f"; {running}" if running else ""), file=sys.stderr)
        return exits.SESSION_CUT
    from sofa_top.recording.report import session_summary

    summary = session_summary(session.session_path)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_summary(summary)
    if failed:
        print(
            f"sofa-top: recording stopped early ({thread_failures(session)}); "
            f"{session.session_path} keeps what was recorded until then"
            + (f"; {running}" if running else ""),
            file=sys.stderr,
        )
        return exits.RECORDING_FAILED
    if running:
        print(f"sofa-top: {running}", file=sys.stderr)
    if stop_reason:
        return exits.signal_status(stop_reason[0]) or 0  # "duration reached": 0
    return exits.workload_status(session.exit_code)


def render_summary(s: dict[str, Any]) -> None:
    """Print the summary for people, with rich."""
    con = Console()
    t = s.get("target") or {}
    con.print(f"[bold]sofa-top[/] session [cyan]{escape(str(s['session']))}[/]")
    v = s["verdict"]
    con.print(f"[bold]{v['headline']}[/] (confidence {v['confidence']:.0%})")
    for rec in v["recommendations"]:
        con.print(f"  -> {rec}")
    con.print(
        f"target PID {t.get('pid')} ({escape(' '.join(t.get('cmdline') or [])[:80])}), "
        f"{s['duration_s']} s, ended: {s['end_reason']}"
    )
    cpu = s["cpu"]
    if cpu["tree_mean_percent"] is not None:
        con.print(
            f"CPU: mean {cpu['tree_mean_percent']:.0f}% max {cpu['tree_max_percent']:.0f}% "
            f"(of {cpu['cores']} cores x 100%), "
            f"RSS max {(cpu['rss_max_bytes'] or 0) / 2**20:.0f} MiB"
        )
    if s.get("dropped_samples"):
        con.print(
            f"[red]{s['dropped_samples']} samples dropped by sofa-top[/] (its writer fell "
            "behind): the session misses them"
        )
    if s["steps"].get("dropped"):
        con.print(
            f"[red]{s['steps']['dropped']} steps dropped by the agent[/] (its queue was full): "
            "the step figures miss them"
        )
    st = s["stacks"]
    if st["error"]:
        con.print(f"[yellow]stacks unavailable:[/] {st['error']}")
        if st["hint"]:
            con.print(f"  fix: {st['hint']}")
    elif st["top"]:
        split = ", ".join(f"{k} {v:.0%}" for k, v in st["split"].items())
        con.print(f"stacks: {st['thread_samples']} thread-samples; {split}")
        table = Table("function", "file:line", "own %", "total %", "thread", "class")
        for f in st["top"]:
            table.add_row(
                escape(str(f["function"])),
                escape(f"{f['file']}:{f['line']}"),
                f"{f['own_pct']:.1f}",
                f"{f['total_pct']:.1f}",
                escape(str(f["thread"])),
                f["class"],
            )
        con.print(table)
