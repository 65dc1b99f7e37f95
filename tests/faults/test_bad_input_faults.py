"""Fault matrix, bad input (promise 4): one clear line on stderr and a non-zero exit, never a
traceback, never a dashboard waiting for data that cannot come."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from faults.conftest import one_line_error, running, sofa, target_argv

PAGE = 4096  # SQLite's default page size, which the session store keeps


@pytest.fixture(scope="module")
def good_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-second session of a busy target."""
    out = tmp_path_factory.mktemp("good") / "good.sofa"
    with running(target_argv("busy")) as target:
        proc = sofa("record", "--pid", str(target.pid), "--duration", "2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _damage(good: Path, kind: str, path: Path) -> Path:
    rng = random.Random(kind)  # the same damage on every run
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(rng.randbytes(5000))
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size * 6 // 10])
    elif kind == "damaged-page":  # one whole page in the middle overwritten
        data = bytearray(good.read_bytes())
        page = len(data) // PAGE // 2
        data[page * PAGE : (page + 1) * PAGE] = rng.randbytes(PAGE)
        path.write_bytes(bytes(data))
    elif kind == "directory":
        path.mkdir()
    return path


@pytest.mark.parametrize("kind", ["empty", "random", "truncated", "damaged-page", "directory"])
def test_unreadable_session_files(good_session: Path, tmp_path: Path, kind: str) -> None:
    """export and replay of a file that is not (or no longer) a readable session."""
    bad = _damage(good_session, kind, tmp_path / f"{kind}.sofa")
    for args in (["export", str(bad), "-o", str(tmp_path / "out.json")], ["replay", str(bad)]):
        line = one_line_error(sofa(*args, timeout=30))
        assert str(bad.name) in line
        assert any(w in line for w in ("not a readable", "damaged", "no such session")), line


@pytest.mark.parametrize(
    "args, expected",
    [
        (["record", "--pid", "99999999999999999999"], "no such process"),
        (["record", "--pid", "2", "--interval", "1e309"], "positive number"),
        (["record", "--pid", "2", "--duration", "inf"], "positive number"),
        (["attach", "2", "--stack-rate", "-0"], "positive number"),
        (["export", "/etc/passwd"], "not a readable sofa-top session"),
        (["record", "-o", "/dev/null", "--", "true"], "already exists"),
    ],
)
def test_hostile_arguments(args: list[str], expected: str) -> None:
    assert expected in one_line_error(sofa(*args, timeout=30))
