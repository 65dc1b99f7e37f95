"""Export a session file to a trace viewer's format.

- ``perfetto``: native Perfetto protobuf trace (Perfetto UI): process/thread tracks, counters,
  step slices, markers and the Python stacks as a CPU profile.
- ``chrome``: Trace Event Format JSON (Perfetto UI, chrome://tracing): the same content, the
  stacks as flame-chart slices on each thread.
- ``speedscope``: the sampled stacks, one "sampled" profile per thread (speedscope.app).

Exports stream the database (bounded memory), stay under the viewers' event limits by merging
or thinning (and say so in ``ExportResult.notes``), and write to a temp file that is renamed
into place at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from sofa_top.datamodel.errors import UserError
from sofa_top.export.common import (
    MAX_EVENTS,
    ExportResult,
    SessionModel,
    Written,
    atomic_output,
    load_model,
)
from sofa_top.recording.reader import SessionReader

__all__ = ["FORMATS", "MAX_EVENTS", "ExportResult", "default_output", "export_session"]

Writer = Callable[[SessionReader, SessionModel, IO[bytes], int], Written]

FORMATS: dict[str, str] = {
    "perfetto": ".pftrace",
    "chrome": ".chrome.json",
    "speedscope": ".speedscope.json",
}


def _writer(fmt: str) -> Writer:
    # Imported on use: the perfetto protos take a moment to load and only one format needs them.
    if fmt == "perfetto":
        from sofa_top.export.perfetto import write_perfetto

        return write_perfetto
    if fmt == "chrome":
        from sofa_top.export.chrome import write_chrome

        return write_chrome
    from sofa_top.export.speedscope import write_speedscope

    return write_speedscope


def default_output(session_path: Path, fmt: str) -> Path:
    """Where an export goes without ``-o``: next to the session, e.g. ``run.sofa`` ->
    ``run.pftrace``."""
    return session_path.with_name(session_path.stem + FORMATS[fmt])


def export_session(
    session_path: Path, fmt: str, out: Path | None, *, max_events: int = MAX_EVENTS
) -> ExportResult:
    """Export ``session_path`` as ``fmt`` to ``out`` (default: next to the session)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r} (choose one of: {', '.join(FORMATS)})")
    began = time.perf_counter()
    target = out if out is not None else default_output(session_path, fmt)
    if target.exists() and session_path.exists() and target.samefile(session_path):
        raise UserError(f"refusing to export over the session file itself: {target}")
    writer = _writer(fmt)
    reader = SessionReader(session_path)
    # One read transaction: a session still being recorded exports as one consistent state;
    # damage SQLite's own checks let through (JSON, numbers) is the reader's one line too.
    with reader, reader.read_snapshot():
        model = load_model(reader)
        with atomic_output(target) as f:
            written = writer(reader, model, f, max_events)
    return ExportResult(
        path=target,
        fmt=fmt,
        events=written.events,
        bytes=target.stat().st_size,
        seconds=time.perf_counter() - began,
        notes=written.notes,
    )
