"""The ``sofa-top`` command line: parse, dispatch, and turn every user-facing failure into one
line on stderr and a non-zero exit (``UserError``), never a traceback."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

from sofa_top.cli import record, saved, watch
from sofa_top.cli.failures import on_thread_failure
from sofa_top.cli.parser import build_parser, web_of
from sofa_top.datamodel.errors import UserError

FILE_COMMANDS = ("replay", "export", "diff")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sofa-top`` console script."""
    threading.excepthook = on_thread_failure
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" is the workload's command line, untouched by argparse.
    cmd: list[str] = []
    # For the commands on saved files "--" is argparse's own end of options instead, so that
    # a file named like an option can be given: ``replay -- -run.sofa`` (or ``./-run.sofa``).
    if "--" in argv and argv[0] not in FILE_COMMANDS:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    args = build_parser().parse_args(argv)
    args.cmd = cmd
    try:
        if cmd and args.command not in ("launch", "record", "compare"):
            raise UserError(f"'{args.command or 'sofa-top'}' takes no command after --")
        return _dispatch(args.command, args)
    except UserError as exc:
        print(f"sofa-top: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _dispatch(command: str | None, args: argparse.Namespace) -> int:
    if command == "attach":
        return watch.attach(args)
    if command == "record":
        return record.record(args)
    if command == "launch":
        if web_of(args):
            from sofa_top.cli.web import launch_web

            return launch_web(args)
        return watch.launch(args)
    if command == "demo":
        return watch.demo(args)
    if command == "export":
        return saved.export(args)
    if command == "replay":
        return saved.replay(args)
    if command == "sessions":
        return saved.sessions(args)
    if command == "compare":
        from sofa_top.cli.compare import compare_main

        return compare_main(args)
    if command == "cluster":
        from sofa_top.cli.cluster import cluster_main

        return cluster_main(args)
    if command == "diff":
        from sofa_top.cli.diff import diff_main

        return diff_main(args)
    if command == "serve":
        from sofa_top.cli.web import serve

        return serve(args)
    if command == "doctor":
        from sofa_top.cli.doctor import main as doctor_main

        return doctor_main()
    return watch.home()
