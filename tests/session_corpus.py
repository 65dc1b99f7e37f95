"""The committed corpus of recorded sessions (``tests/sessions/``): each ``NAME.sofa.xz`` (a
session file as sofa-top wrote it, xz-compressed) beside ``NAME.truth.json`` (what its workload
measured itself and was built to be; ``tests/sessions/record_corpus.py`` records both).

``opened(name)`` decompresses a session to a temporary file for the project's own readers;
``judged(name)`` judges it once per process through the current code, as each consumer does.
"""

from __future__ import annotations

import functools
import json
import lzma
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sofa_top.datamodel.verdict import Verdict
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.report import final_verdict, session_summary, session_verdict

CORPUS = Path(__file__).parent / "sessions"
SUFFIX = ".sofa.xz"


def names() -> list[str]:
    """Every session of the corpus, by name."""
    return sorted(p.name.removesuffix(SUFFIX) for p in CORPUS.glob(f"*{SUFFIX}"))


def truth(name: str) -> dict[str, Any]:
    """The session's stored truth (``NAME.truth.json``)."""
    out: dict[str, Any] = json.loads((CORPUS / f"{name}.truth.json").read_text())
    return out


@contextmanager
def opened(name: str) -> Iterator[Path]:
    """The session decompressed to a temporary ``.sofa`` file (removed afterwards)."""
    tmp = Path(tempfile.mkdtemp(prefix="sofa-corpus-"))
    try:
        path = tmp / f"{name}.sofa"
        with lzma.open(CORPUS / f"{name}{SUFFIX}") as src, path.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        yield path
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class Judged:
    """One session read back by each consumer of the current code."""

    meta_keys: frozenset[str]  # the keys of its SQLite ``meta`` table
    report: dict[str, Any]  # ``record --json`` of the file
    rejudged: Verdict  # the whole session judged again from the file (what the hub stores)
    stored: Verdict | None  # the final verdict the live hub stored in the file
    replay: Verdict | None  # the verdict of a replay's snapshot at the file's last instant
    stored_ranks: Verdict | None  # the last cross-rank verdict the live hub stored (a marker)
    replay_ranks: Verdict | None  # the cross-rank verdict of that replay snapshot


@functools.cache
def judged(name: str) -> Judged:
    with opened(name) as path:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = frozenset(row[0] for row in db.execute("SELECT key FROM meta"))
        finally:
            db.close()
        reader = SessionReader(path)
        try:
            stored = final_verdict(reader.events("verdict"))
            marks = reader.events("rank-verdict")
        finally:
            reader.close()
        replay = ReplaySource(path)
        try:
            span = replay.time_range
            assert span is not None, f"{name}: an empty session"
            at_end = replay.snapshot_at(span[1])
        finally:
            replay.stop()
        ranks = Verdict.from_json(marks[-1].data, marks[-1].message) if marks else None
        return Judged(
            meta, session_summary(path), session_verdict(path), stored, at_end.verdict,
            ranks, at_end.rank_verdict,
        )  # fmt: skip
