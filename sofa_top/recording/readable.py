"""Whether a path is a session sofa-top can read, and the one line that says why not.

Every reader of a session file goes through here (``SessionReader`` opens with ``check_file``
and ``check_schema``; replay, the exports, the report and the catalogue read inside
``reading``), so a missing, empty, foreign, newer or damaged file reads as one ``UserError``
line whichever command met it, never as a traceback.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from sofa_top.datamodel.errors import UserError

SQLITE_MAGIC = b"SQLite format 3\x00"
# A WAL file's first four bytes (big- and little-endian checksums): sqlite's wal.c.
WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
SIDE_FILES = ("-wal", "-shm")
# The tables every sofa-top session has had since schema v1 (store._SCHEMA).
TABLES = frozenset(
    {
        "meta",
        "series",
        "points",
        "processes",
        "stack_strings",
        "stack_windows",
        "stack_counts",
        "steps",
        "events",
    }
)
# What a damaged file raises once SQLite has opened it: its own errors, and the values it
# hands back that no longer read as sofa-top wrote them (a flipped byte turns a REAL into a
# TEXT, a JSON object into garbage, a count into 10**18).
DAMAGE = (
    sqlite3.Error,
    ValueError,  # JSON, numbers, text (UnicodeDecodeError)
    TypeError,
    LookupError,
    AttributeError,
    ArithmeticError,
    RecursionError,  # JSON nested past the interpreter's limit
)


# SQLite's operational errors that say nothing of the file's contents.
_NOT_DAMAGE = ("unable to open", "disk i/o", "locked", "readonly", "busy", "interrupt")


def one_line(text: str) -> str:
    """One printable line (a damaged file's text can hold newlines or terminal escapes)."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))


def damaged(path: Path, exc: BaseException) -> UserError:
    """The line for a file that opened but whose contents do not read."""
    if isinstance(exc, sqlite3.OperationalError) and any(
        w in str(exc).lower() for w in _NOT_DAMAGE
    ):
        return UserError(one_line(f"cannot read session {path}: {exc}"))
    if isinstance(exc, sqlite3.Error):
        return UserError(one_line(f"cannot read session {path}: the file is damaged ({exc})"))
    # A value SQLite handed back that sofa-top never writes (or a reader's own bug: said too).
    return UserError(
        one_line(
            f"cannot read session {path}: the file is damaged, or sofa-top failed to read it "
            f"({type(exc).__name__}: {exc})"
        )
    )


@contextlib.contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn whatever a damaged session raises while it is read (and what is derived from it)
    into the one line of ``damaged``."""
    try:
        yield
    except UserError:
        raise
    except DAMAGE as exc:
        raise damaged(path, exc) from None


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def check_file(path: Path) -> None:
    """Raise the line for a path that is not a file SQLite could open as a session: missing
    (or only its WAL left), a directory, unreadable, empty, a WAL itself, not SQLite."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise UserError(f"not a session file: {path} is a directory")
        if not stat.S_ISREG(st.st_mode):  # a pipe or a device: opening it could block
            raise UserError(f"not a session file: {path} (not a regular file)")
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        left = [s for s in SIDE_FILES if _side(path, s).exists()]
        if "-wal" in left:
            raise UserError(
                f"no such session file: {path} (only its write-ahead log {path.name}-wal is "
                "left, which cannot be read without the database file)"
            ) from None
        raise UserError(f"no such session file: {path}") from None
    except PermissionError:
        raise UserError(f"cannot read session file {path}: permission denied") from None
    except OSError as exc:
        raise UserError(f"cannot read session file {path}: {exc.strerror or exc}") from None
    if head.startswith(SQLITE_MAGIC):
        return
    if not head:
        raise UserError(f"not a readable sofa-top session: {path} (the file is empty)")
    if head[:4] in WAL_MAGIC:
        db = path.name.removesuffix("-wal")
        raise UserError(
            f"not a readable sofa-top session: {path} is SQLite's write-ahead log"
            + (f" of {db}: open {db} instead" if db != path.name else ", not a database")
        )
    if len(head) < len(SQLITE_MAGIC) and SQLITE_MAGIC.startswith(head):
        raise UserError(f"not a readable sofa-top session: {path} (cut short: {len(head)} bytes)")
    raise UserError(f"not a readable sofa-top session: {path} (not an SQLite database)")


def check_schema(db: sqlite3.Connection, path: Path, newest: int) -> None:
    """Raise the line for an SQLite file that is not a session this sofa-top reads: another
    program's database, one written by a newer sofa-top, one too damaged to list its tables."""
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        stored = None
        if "meta" in tables:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            stored = None if row is None else json.loads(row[0])
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):  # a header SQLite does not take (page size, ...)
            raise UserError(one_line(f"not a readable sofa-top session: {path} ({exc})")) from None
        raise damaged(path, exc) from None
    except DAMAGE as exc:  # the schema_version value itself
        raise damaged(path, exc) from None
    # The meta key is written with the file; user_version too. Either newer says the same.
    if isinstance(stored, int) and not isinstance(stored, bool):
        version = max(version, stored)
    if version > newest:
        raise UserError(
            f"{path} was written by a newer sofa-top (schema v{version}; this one reads up to "
            f"v{newest}): upgrade sofa-top"
        )
    missing = sorted(TABLES - tables)
    if version < 1 or missing:
        what = f"no {', '.join(missing[:3])} table" if missing else "no sofa-top schema version"
        raise UserError(
            f"not a sofa-top session: {path} (an SQLite database, but {what}"
            f"{'s' if len(missing) > 1 else ''})"
        )
