"""``sofa-top compare``: its flags, and the comparison rendered as text (a rich table)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sofa_top.cli import exits
from sofa_top.collectors.discovery import JobCopy
from sofa_top.datamodel.errors import UserError
from sofa_top.launch import FINISH_BOUND_S
from sofa_top.optimizers.compare import (
    CompareEvent,
    CompareResult,
    configs,
    default_configs,
    run_compare,
)
from sofa_top.optimizers.compare.record import note_measured
from sofa_top.optimizers.compare.text import (
    diagnosis_lines,
    fmt,
    headroom_cell,
    progress_line,
    ranking_line,
)
from sofa_top.optimizers.headroom import headroom_line

# Written to a file or a pipe, the table must not be cut to the 80 columns rich assumes there.
PIPE_WIDTH = 200


def add_compare_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand to ``build_parser``'s subparsers."""
    c: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="re-run CMD under optimizer configurations and compare throughput",
        usage="sofa-top compare [--configs LIST] [--repeats N] [--max-repeats N] [--budget S] "
        "[--steps K | --seconds S] [--parallelism N] [--json] (-- CMD [ARGS...] | --like PID "
        "[--yes])",
    )
    c.add_argument(
        "--like",
        type=int,
        metavar="PID",
        help="re-run a copy of that running job (its command line, directory and environment, "
        "from /proc); the job itself is not touched",
    )
    c.add_argument("--yes", action="store_true", help="with --like: do not ask first")
    c.add_argument(
        "--configs",
        default=",".join(default_configs()),
        help=f"comma-separated, from {', '.join(configs())} (default: all of them)",
    )
    c.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="runs per config, at least (3)"
    )
    c.add_argument(
        "--max-repeats",
        type=int,
        metavar="N",
        help="runs per config at most, while the noise hides a difference (repeats + 4)",
    )
    c.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="seconds for the runs past --repeats (default: as long as those took)",
    )
    g = c.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, metavar="K", help="measured steps per run (default 50)")
    g.add_argument("--seconds", type=float, metavar="S", help="measured seconds per run")
    c.add_argument("--warmup-steps", type=int, default=5, metavar="W", help="excluded steps (5)")
    c.add_argument(
        "--parallelism",
        type=int,
        metavar="N",
        help="prefetch parallelism (tf.data calls and pool, DataLoader workers); default: "
        "from the baseline's diagnosis, searched when the input waits",
    )
    c.add_argument("--json", action="store_true", help="print the JSON result on stdout")
    c.add_argument("-o", "--output-dir", metavar="DIR", help="where the session files go")
    return c


def _print_progress(event: CompareEvent) -> None:
    print(progress_line(event), file=sys.stderr, flush=True)


class _Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP (a closed terminal, a job scheduler): compare stops the run
    it was in and finalizes its session, and exits 128 + N (within ``SIGNAL_EXIT_S``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# After a stop signal compare stops the run it was in and finalizes that session (``record_one``
# waits for it: at most ``FINISH_BOUND_S``); past this it exits regardless, so that a stuck
# teardown never leaves Ctrl-C unanswered
SIGNAL_EXIT_S = FINISH_BOUND_S + 13.0


def _stop(signum: int, _frame: object) -> None:
    status = 128 + signum
    # a daemon timer: it outlives a main thread stuck in teardown, never a normal exit
    timer = threading.Timer(SIGNAL_EXIT_S, _exit_now, args=(status,))
    timer.daemon = True
    timer.start()
    raise _Stopped(signum)


def _exit_now(status: int) -> None:
    with contextlib.suppress(Exception):
        print(
            f"sofa-top: compare did not finish stopping in {SIGNAL_EXIT_S:.0f} s", file=sys.stderr
        )
        sys.stderr.flush()
    os._exit(status)


def compare_main(args: argparse.Namespace) -> int:
    """Run ``sofa-top compare`` (``args.cmd`` holds the command after ``--``). Exit status 1
    when the baseline failed (compare stops there) or every configuration failed; 128 + N when
    signal N stopped it."""
    if threading.current_thread() is not threading.main_thread():
        return _compare(args)
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, _stop) for sig in stops}
    try:
        return _compare(args)
    except _Stopped as exc:
        return 128 + exc.signum
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _compare(args: argparse.Namespace) -> int:
    cmd = list(getattr(args, "cmd", []) or [])
    like = None
    if getattr(args, "like", None) is not None:
        if cmd:
            raise UserError("compare takes either --like PID or -- CMD, not both")
        like = _confirmed_copy(args.like, args.yes)
        cmd = list(like.cmd)
    if not cmd:
        raise UserError("compare needs a command: sofa-top compare -- python train.py")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.repeats < 1 or (args.steps is not None and args.steps < 1):
        raise UserError("--repeats and --steps must be at least 1")
    max_repeats = getattr(args, "max_repeats", None)
    if max_repeats is not None and max_repeats < args.repeats:
        raise UserError("--max-repeats must be at least --repeats")
    budget = getattr(args, "budget", None)
    if budget is not None and budget < 0:
        raise UserError("--budget must be 0 or more seconds")
    steps = args.steps if args.steps is not None or args.seconds is not None else 50
    out_dir = args.output_dir
    if out_dir is None:
        from sofa_top.recording.paths import sessions_dir

        out_dir = sessions_dir()
    result = run_compare(
        cmd,
        configs,
        repeats=args.repeats,
        steps=steps,
        seconds=args.seconds,
        warmup_steps=max(0, args.warmup_steps),
        on_progress=_print_progress,
        out_dir=out_dir,
        parallelism=getattr(args, "parallelism", None),
        like=like,
        max_repeats=max_repeats,
        budget_s=budget,
    )
    note_measured(result)
    if args.json:
        import json

        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_compare(result)
    if result.stopped is not None:
        print(f"sofa-top: compare stopped: {result.stopped}", file=sys.stderr)
        return exits.COMPARE_FAILED
    if result.all_failed:
        print("sofa-top: compare: every configuration failed (see errors)", file=sys.stderr)
        return exits.COMPARE_FAILED
    return 0


def _confirmed_copy(pid: int, yes: bool) -> JobCopy:
    """The running job's copy, once the user said yes to what it means (or passed --yes)."""
    from sofa_top.collectors.discovery import job_copy
    from sofa_top.collectors.process import describe_pid

    describe_pid(pid)  # unknown, zombie, ourselves: one line
    copy = job_copy(pid)
    if yes:
        return copy
    if not sys.stdin.isatty():
        raise UserError(f"compare --like {pid} asks before re-running a copy: pass --yes")
    print(copy.describe(), file=sys.stderr)
    answer = input("Re-run the copy under each configuration? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise UserError("not confirmed: nothing was run")
    return copy


def _console() -> Console:
    if sys.stdout.isatty():
        return Console()
    return Console(width=max(PIPE_WIDTH, shutil.get_terminal_size((PIPE_WIDTH, 24)).columns))


def compare_table(result: CompareResult) -> Table:
    """The comparison as a rich table: one row per configuration."""
    rounds = (
        f"{result.repeats}-{result.rounds}" if result.rounds > result.repeats else result.repeats
    )
    t = Table(title=f"sofa-top compare ({rounds} repeat(s), interleaved)")
    for col in ("config", "throughput (median, min-max)", "speedup", "compile s", "verdict"):
        t.add_column(col, justify="right" if col in ("speedup", "compile s") else "left")
    t.add_column("headroom", overflow="fold")
    t.add_column("applied / flags", overflow="fold")
    for r in result.runs:
        tp = r.throughput
        thr = f"{fmt(tp.median)} ({fmt(tp.min)}-{fmt(tp.max)}) {tp.unit}"
        if r.partial:
            thr += " partial"
        notes = ", ".join(r.applied) or "-"
        if r.not_applied:
            notes += "; not applied: " + "; ".join(f"{t_}: {why}" for t_, why in r.not_applied)
        if r.flags:
            notes += f" [{', '.join(r.flags)}]"
        if r.data_change:
            notes += f"; data changed: {r.data_change}"
        if r.parallelism is not None:
            notes += f" (parallelism {r.parallelism})"
        name = f"[bold]{r.config}[/bold]" if r.config == result.best else r.config
        sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        # notes as Text: "[toggle-not-applied]" is not rich markup (it vanished from the table)
        t.add_row(
            name, thr, sp, fmt(r.compile_s, ".1f"), r.verdict or "-", Text(headroom_cell(r)),
            Text(notes),
        )  # fmt: skip
    return t


def render_compare(result: CompareResult, console: Console | None = None) -> None:
    """The table, the diagnosis, the winner and the code changes that reproduce it."""
    console = console or _console()
    console.print(compare_table(result))
    for line in diagnosis_lines(result):
        console.print(line, highlight=False)
    best = result.run(result.best)
    if best is not None:
        console.print(
            f"best: [bold]{result.best}[/bold]: {headroom_line(best.speedup, best.headroom)}"
        )
    elif result.best_note:
        console.print(f"best: none: {result.best_note}", highlight=False, markup=False)
    if (ranked := ranking_line(result)) is not None:
        console.print(ranked, highlight=False, markup=False)
    for c in result.changes:
        console.print(f"  - {c}", highlight=False)
    for r in result.runs:
        for a in r.advice:  # the code change that would let a toggle apply
            console.print(f"{r.config}: to apply it: {a}", highlight=False, markup=False)
        for e in r.errors:
            console.print(f"[red]{r.config}: {e}[/red]")
