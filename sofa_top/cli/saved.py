"""The commands on saved sessions: ``export``, ``replay`` and ``sessions``."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

from sofa_top.datamodel.errors import UserError

# Written to a file or a pipe, the listing must not be cut to the 80 columns rich assumes there.
PIPE_WIDTH = 10_000


def resolve_session(text: str) -> Path:
    """A session given as a path, a file name in the sessions directory, ``last`` (the user's
    last launch, attach or record) or ``last-compare`` (the last comparison's first run)."""
    from sofa_top.recording.catalogue import last_session
    from sofa_top.recording.paths import sessions_dir
    from sofa_top.recording.readable import check_file

    path = Path(text).expanduser()
    if path.is_file():
        return path
    if "/" in text or path.exists():
        check_file(path)  # raises the line that says why not (a directory, only its WAL left)
        return path
    root = sessions_dir()
    if text in ("last", "last-compare"):
        return last_session(root, compare=text == "last-compare").path
    # escaped: a name's own '*', '?' and '[' are letters of the name, not a pattern
    matches = sorted(root.glob(f"{glob.escape(text)}*.sofa")) if "/" not in text else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise UserError(f"'{text}' matches {len(matches)} sessions; give more of the name")
    if path.name.endswith((".sofa", ".sofa-wal")):
        check_file(path)
    raise UserError(f"no such session: {text}")


def check_intact(path: Path) -> None:
    """Refuse a session file that is not a session, or has damaged pages."""
    from sofa_top.recording.reader import SessionReader

    with SessionReader(path) as reader:
        reader.check_intact()


def export(args: argparse.Namespace) -> int:
    """``sofa-top export SESSION``."""
    from sofa_top.export import export_session

    out = Path(args.output).expanduser() if args.output else None
    path = resolve_session(args.session)
    check_intact(path)
    result = export_session(path, args.format, out)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"{result.path} ({args.format}, {result.events} events, {result.seconds:.2f} s)")
    return 0


def replay(args: argparse.Namespace) -> int:
    """``sofa-top replay SESSION``."""
    return replay_path(args.session)


def replay_path(session: str) -> int:
    """Open the dashboard read-only on a saved session."""
    from sofa_top.recording.replay import ReplaySource
    from sofa_top.tui.app import run_dashboard

    path = resolve_session(session)
    check_intact(path)
    source = ReplaySource(path)
    try:
        # Its last instant, once: damage past SQLite's page checks is one line here, not a
        # dashboard waiting for snapshots that cannot be read.
        source.snapshot()
    except UserError:
        source.stop()
        raise
    run_dashboard(source)
    return 0


def sessions(args: argparse.Namespace) -> int:
    """``sofa-top sessions [--json] [--prune DAYS [--yes]]``."""
    from rich.console import Console

    from sofa_top.recording.catalogue import list_entries, prune, render_sessions, sessions_json

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
    found = list_entries()
    if args.json:
        json.dump(sessions_json(found), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_sessions(found, Console() if sys.stdout.isatty() else Console(width=PIPE_WIDTH))
    return 0
