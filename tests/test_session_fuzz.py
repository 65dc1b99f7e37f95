"""A broken file is a clear line: every reader of a session (replay, each export, diff, the report,
the listing, the CLI's integrity check) of a real session file cut short or with bytes flipped
either reads it or raises the one ``UserError`` line, never another exception and never a hang;
and each kind of broken file a user meets says what it is, in process (the CLI's subprocess runs
of the same kinds are the fault matrix's, ``tests/faults/test_bad_input_faults.py``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_damage import (
    FORMATS,
    IS_ROOT,
    KINDS,
    READERS,
    expected_words,
    make_broken,
    record_small,
    run_bounded,
)
from synthetic_session import make_session

from sofa_top.cli.main import main
from sofa_top.cli.saved import check_intact
from sofa_top.datamodel.errors import UserError

READER_TIMEOUT_S = 20.0  # a reader of a 100 KB file takes tens of milliseconds
ALL_READERS = {**READERS, "intact": lambda path, out: check_intact(path)}


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A real recorded session (``sofa-top record`` of a sleeping Python: its agent, stacks,
    verdicts) and a synthetic one written by the store itself (steps, GPU, stack counts)."""
    d = tmp_path_factory.mktemp("originals")
    make_session(d / "synthetic.sofa")
    record_small(d / "recorded.sofa")
    return {name: (d / f"{name}.sofa").read_bytes() for name in ("recorded", "synthetic")}


def _judge(name: str, exc: BaseException | None, path: Path) -> None:
    if exc is None:
        return
    if not isinstance(exc, UserError):
        detail = "".join(traceback.format_exception(exc))
        pytest.fail(f"{name} of {path.name} raised {type(exc).__name__}:\n{detail}")
    line = str(exc)
    assert line and "\n" not in line and "Traceback" not in line, (name, line)


def _read_everywhere(path: Path, out: Path) -> None:
    for name, reader in ALL_READERS.items():
        _judge(name, run_bounded(lambda r=reader: r(path, out), READER_TIMEOUT_S), path)


def test_every_reader_reads_the_intact_files(originals: dict[str, bytes], tmp_path: Path) -> None:
    """The property below would hold of readers that refuse everything: these read."""
    for name, data in originals.items():
        path = tmp_path / f"{name}.sofa"
        path.write_bytes(data)
        for reader_name, reader in ALL_READERS.items():
            exc = run_bounded(lambda r=reader, p=path: r(p, tmp_path), READER_TIMEOUT_S)
            assert exc is None, (name, reader_name, exc)


_FLIP = st.tuples(st.integers(0, 1 << 20), st.integers(1, 255))  # (offset, xor mask)
_SETTINGS = settings(
    deadline=None,  # the bound is READER_TIMEOUT_S per reader; examples vary with the damage
    derandomize=True,  # the same files on every run and in CI
    database=None,  # ... and no replay of another run's failures
    suppress_health_check=[HealthCheck.too_slow],
)


def _mutated(data: bytes, cut: int | None, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    if cut is not None:
        del out[cut % (len(out) + 1) :]
    for offset, mask in flips:
        if out:
            out[offset % len(out)] ^= mask
    return bytes(out)


def _check(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.sofa"
        path.write_bytes(data)
        _read_everywhere(path, Path(d))


@settings(_SETTINGS, max_examples=60)
@given(which=st.sampled_from(("recorded", "synthetic")), flips=st.lists(_FLIP, max_size=12))
def test_a_file_with_flipped_bytes_reads_or_is_one_line(
    originals: dict[str, bytes], which: str, flips: list[tuple[int, int]]
) -> None:
    _check(_mutated(originals[which], None, flips))


@settings(_SETTINGS, max_examples=20)
@given(
    which=st.sampled_from(("recorded", "synthetic")),
    cut=st.integers(0, 1 << 20),
    flips=st.lists(_FLIP, max_size=3),
)
def test_a_file_cut_short_reads_or_is_one_line(
    originals: dict[str, bytes], which: str, cut: int, flips: list[tuple[int, int]]
) -> None:
    _check(_mutated(originals[which], cut, flips))


TABLES = ("meta", "series", "points", "processes", "stack_strings", "stack_windows")
TABLES += ("stack_counts", "steps", "events")
# What a flipped byte in a record's header makes of a value: another type, out of range, not
# JSON, JSON of the wrong shape.
_VALUE = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.sampled_from(("{}", "[]", "null", "[[1, 2]]", '{"pid": "x"}', '"s"', 1e300, 2**62)),
)
_EDIT = st.tuples(st.sampled_from(TABLES), st.integers(0, 30), st.integers(0, 1000), _VALUE)


def _edited(data: bytes, edits: list[tuple[str, int, int, object]], directory: Path) -> bytes:
    """The file with one stored value per edit replaced (table, column, row: modulo theirs)."""
    path = directory / "edited.sofa"
    path.write_bytes(data)
    db = sqlite3.connect(path)
    for table, col, row, value in edits:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        rowids = [r[0] for r in db.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        if rowids:
            column = cols[col % len(cols)]
            with contextlib.suppress(sqlite3.IntegrityError):  # a UNIQUE column's clash
                db.execute(
                    f"UPDATE {table} SET {column} = ? WHERE rowid = ?",
                    (value, rowids[row % len(rowids)]),
                )
    db.commit()
    db.close()
    out = path.read_bytes()
    path.unlink()
    return out


@settings(_SETTINGS, max_examples=20)
@given(
    which=st.sampled_from(("recorded", "synthetic")), edits=st.lists(_EDIT, min_size=1, max_size=4)
)
def test_a_file_with_values_of_the_wrong_kind_reads_or_is_one_line(
    originals: dict[str, bytes], which: str, edits: list[tuple[str, int, int, object]]
) -> None:
    """The values SQLite's page checks pass but sofa-top never wrote: a REAL turned TEXT, a
    JSON object turned a number, a timestamp of 1e300."""
    with tempfile.TemporaryDirectory() as d:
        _check(_edited(originals[which], edits, Path(d)))


@pytest.mark.parametrize("value", [None, "x", b"\x00\xff", "[5]", "1e400", 2**62, -1])
def test_a_damaged_schema_version_reads_or_is_one_line(
    originals: dict[str, bytes], tmp_path: Path, value: object
) -> None:
    """The one value the opening checks read before any reader does (a run of the property
    above, not derandomized, found its NULL raising TypeError)."""
    path = tmp_path / "s.sofa"
    path.write_bytes(originals["recorded"])
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (value,))
    db.commit()
    db.close()
    _read_everywhere(path, tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_each_broken_kind_says_what_it_is(
    originals: dict[str, bytes], tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if kind == "no-permission" and IS_ROOT:
        pytest.skip("root reads a file without read permission (the CLI row runs it as nobody)")
    good = tmp_path / "good.sofa"
    good.write_bytes(originals["recorded"])
    bad = make_broken(good, kind, tmp_path / "broken")
    before = sorted(os.listdir(bad.parent))
    words = expected_words(kind)
    for name, reader in ALL_READERS.items():
        exc = run_bounded(lambda r=reader: r(bad, tmp_path), READER_TIMEOUT_S)
        if kind == "damaged-page" and exc is None and name != "intact":
            continue  # a reader that never touches the page reads the rest; the CLI checks first
        assert isinstance(exc, UserError), (name, exc)
        line = str(exc)
        assert "\n" not in line and any(w in line for w in words), (name, line)
        assert bad.name in line, (name, line)
    # The CLI's line (in process; its subprocess runs: the fault matrix's bad-input rows)
    for argv in (
        ["replay", str(bad)],
        ["diff", str(good), str(bad)],
        *(["export", str(bad), "-f", fmt, "-o", str(tmp_path / fmt)] for fmt in FORMATS),
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("sofa-top: "), (argv, err)
        assert any(w in err for w in words), (argv, err)
        assert not any(p.name.startswith(fmt) for p in tmp_path.iterdir() for fmt in FORMATS)
    # Reading wrote nothing beside it but SQLite's own side files of a database it opened.
    after = sorted(os.listdir(bad.parent))
    extra = set(after) - set(before)
    assert all(n in (f"{bad.name}-wal", f"{bad.name}-shm") for n in extra), extra
    if kind in ("missing", "wal-without-db", "directory"):
        assert after == before, after
    shutil.rmtree(tmp_path / "broken", ignore_errors=True)
