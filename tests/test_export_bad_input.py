"""Exports of bad input: one clear line, no traceback, no file left under the final name, an
earlier export untouched."""

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from synthetic_session import session_file

from sofa_top.datamodel.errors import UserError
from sofa_top.export import FORMATS, export_session


@pytest.fixture
def session(tmp_path: Path) -> Path:
    return session_file(tmp_path)


def _assert_clean_failure(exc: pytest.ExceptionInfo[UserError], out: Path) -> None:
    msg = str(exc.value)
    assert msg and "\n" not in msg and "Traceback" not in msg
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".part")]


def test_unknown_format(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.out"
    with pytest.raises(UserError, match="unknown export format 'svg'") as exc:
        export_session(session, "svg", out)
    _assert_clean_failure(exc, out)


def test_missing_session(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    with pytest.raises(UserError, match="no such session file") as exc:
        export_session(tmp_path / "nope.sofa", "chrome", out)
    _assert_clean_failure(exc, out)


def test_random_bytes(tmp_path: Path) -> None:
    path = tmp_path / "noise.sofa"
    path.write_bytes(random.Random(7).randbytes(64 << 10))
    out = tmp_path / "x.json"
    with pytest.raises(UserError, match="not a readable sofa-top session") as exc:
        export_session(path, "chrome", out)
    _assert_clean_failure(exc, out)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_truncated_session(session: Path, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "cut.sofa"
    shutil.copy(session, path)
    os.truncate(path, path.stat().st_size // 2)
    out = tmp_path / f"cut.{fmt}"
    with pytest.raises(UserError, match=r"cut\.sofa") as exc:
        export_session(path, fmt, out)
    _assert_clean_failure(exc, out)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_damage_found_mid_export_leaves_no_file(session: Path, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "bad.sofa"
    shutil.copy(session, path)
    size = path.stat().st_size
    # Garbage over every page past the tables' root pages (created first, meta's among them):
    # the file opens and its metadata reads, the bulk of the data does not.
    with path.open("r+b") as f:
        f.seek(16 * 4096)
        f.write(random.Random(3).randbytes(size - 16 * 4096))
    out = tmp_path / f"bad.{fmt}"
    out.write_text("an earlier export")
    with pytest.raises(UserError, match="damaged") as exc:
        export_session(path, fmt, out)
    msg = str(exc.value)
    assert "\n" not in msg
    assert out.read_text() == "an earlier export"  # the old file is untouched
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_future_schema(session: Path, tmp_path: Path) -> None:
    path = tmp_path / "future.sofa"
    shutil.copy(session, path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    out = tmp_path / "x.pftrace"
    with pytest.raises(UserError, match="schema v99") as exc:
        export_session(path, "perfetto", out)
    _assert_clean_failure(exc, out)


def test_unwritable_output(session: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "x.json"
    with pytest.raises(UserError, match="cannot write") as exc:
        export_session(session, "chrome", out)
    assert "\n" not in str(exc.value) and not out.exists()
    with pytest.raises(UserError, match="is a directory"):
        export_session(session, "chrome", tmp_path)


def test_refuses_to_overwrite_the_session(session: Path) -> None:
    with pytest.raises(UserError, match="session file itself"):
        export_session(session, "chrome", session)
    assert export_session(session, "chrome", None).path != session
