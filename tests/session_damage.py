"""Broken session files, each kind as a user meets it, and every in-process reader of a session:
what ``tests/test_session_fuzz.py`` and the fault matrix's bad-input rows run."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from sofa_top.datamodel.errors import UserError
from sofa_top.recording.store import SCHEMA_VERSION, SessionStore

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
PAGE = 4096  # SQLite's default page size, which the session store keeps
IS_ROOT = os.geteuid() == 0
KINDS = (
    "truncated",
    "cut-in-header",
    "zero-length",
    "random-bytes",
    "damaged-page",
    "foreign-sqlite",
    "wal-without-db",
    "the-wal-itself",
    "newer-schema",
    "directory",
    "missing",
    "no-permission",
)
FORMATS = ("perfetto", "chrome", "speedscope")
SLEEPER = (sys.executable, "-c", "import time; time.sleep(0.5)")


def record_small(path: Path) -> Path:
    """A real session: ``sofa-top record`` of a Python that sleeps half a second (3 s here)."""
    proc = subprocess.run(
        [SOFA_TOP, "record", "--duration", "2", "-o", str(path), "--", *SLEEPER],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return path


def _live_wal(directory: Path) -> bytes:
    """The write-ahead log of a session whose writer is still open (its data not yet
    checkpointed into the file)."""
    store = SessionStore(directory / "live.sofa")
    store.set_meta(mode="record", started=1.0)
    store.commit()
    data = (directory / "live.sofa-wal").read_bytes()
    store.close()
    return data


def make_broken(good: Path, kind: str, directory: Path) -> Path:
    """A session path of ``kind`` in ``directory`` (made from a copy of ``good``): the path a
    user would give."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{kind}.sofa"
    rng = random.Random(kind)  # the same damage on every run
    data = good.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) * 6 // 10])
    elif kind == "cut-in-header":
        path.write_bytes(data[:10])
    elif kind == "zero-length":
        path.write_bytes(b"")
    elif kind == "random-bytes":
        path.write_bytes(rng.randbytes(5000))
    elif kind == "damaged-page":  # one whole page in the middle overwritten
        raw = bytearray(data)
        page = len(raw) // PAGE // 2
        raw[page * PAGE : (page + 1) * PAGE] = rng.randbytes(PAGE)
        path.write_bytes(bytes(raw))
    elif kind == "foreign-sqlite":  # another program's database
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('not a session')")
        db.commit()
        db.close()
    elif kind in ("wal-without-db", "the-wal-itself"):
        wal = directory / f"{kind}.sofa-wal"
        wal.write_bytes(_live_wal(Path(directory)))
        for side in ("live.sofa", "live.sofa-wal", "live.sofa-shm"):
            (directory / side).unlink(missing_ok=True)
        return wal if kind == "the-wal-itself" else path
    elif kind == "newer-schema":
        shutil.copy(good, path)
        db = sqlite3.connect(path)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        db.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
        db.commit()
        db.close()
    elif kind == "directory":
        path.mkdir()
    elif kind == "missing":
        pass
    elif kind == "no-permission":
        shutil.copy(good, path)
        path.chmod(0)
    else:
        raise ValueError(kind)
    return path


def expected_words(kind: str) -> tuple[str, ...]:
    """What the one line says of each kind (any of these)."""
    return {
        "truncated": ("damaged",),
        "cut-in-header": ("cut short",),
        "zero-length": ("empty",),
        "random-bytes": ("not an SQLite database",),
        "damaged-page": ("damaged",),
        "foreign-sqlite": ("not a sofa-top session",),
        "wal-without-db": ("write-ahead log",),
        "the-wal-itself": ("write-ahead log",),
        "newer-schema": ("newer sofa-top", "upgrade sofa-top"),
        "directory": ("is a directory",),
        "missing": ("no such session",),
        "no-permission": ("permission denied",),
    }[kind]


# -- every reader of a session, in process ---------------------------------------------------


def _replay(path: Path, out: Path) -> None:
    from sofa_top.recording.replay import ReplaySource

    source = ReplaySource(path)
    try:
        snap = source.snapshot()  # its end, where the dashboard opens
        rng = source.time_range
        if rng is not None:
            source.snapshot_at((rng[0] + rng[1]) / 2)
        source.next_marker()
        assert snap.session_path == str(path)
    finally:
        source.stop()


def _export(fmt: str) -> Callable[[Path, Path], None]:
    def run(path: Path, out: Path) -> None:
        from sofa_top.export import export_session

        export_session(path, fmt, out / f"out.{fmt}")

    return run


def _diff(path: Path, out: Path) -> None:
    from sofa_top.cli.diff import load
    from sofa_top.recording.diff import diff

    kind, summary, label = load(str(path))
    diff(kind, summary, summary, (label, label), 10.0).to_json()


def _report(path: Path, out: Path) -> None:
    from sofa_top.recording.report import session_summary, session_verdict

    session_summary(path)
    session_verdict(path)


def _catalogue(path: Path, out: Path) -> None:
    from sofa_top.recording.catalogue import session_info

    info = session_info(path)  # never raises: a broken file is a listed error
    if info.error is not None:
        assert "\n" not in info.error
        raise UserError(info.error)


READERS: dict[str, Callable[[Path, Path], None]] = {
    "replay": _replay,
    **{f"export-{fmt}": _export(fmt) for fmt in FORMATS},
    "diff": _diff,
    "report": _report,
    "catalogue": _catalogue,
}


def run_bounded(fn: Callable[[], None], timeout: float) -> BaseException | None:
    """Run ``fn`` in a thread; what it raised (None: it returned). A reader still running
    after ``timeout`` fails the caller's test: a hang is no answer."""
    result: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test to judge
            result.append(exc)
        else:
            result.append(None)

    thread = threading.Thread(target=target, daemon=True, name="reader-under-test")
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"a reader still ran after {timeout} s"
    return result[0]
