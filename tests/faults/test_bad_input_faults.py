"""Fault matrix, bad input (promise 4): one clear line on stderr and a non-zero exit, never a
traceback, never a dashboard waiting for data that cannot come."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from other_uid import OtherUser
from session_damage import FORMATS, KINDS, expected_words, make_broken

from faults.conftest import IS_ROOT, one_line_error, running, sofa, target_argv


@pytest.fixture(scope="module")
def good_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-second session of a busy target."""
    out = tmp_path_factory.mktemp("good") / "good.sofa"
    with running(target_argv("busy")) as target:
        proc = sofa("record", "--pid", str(target.pid), "--duration", "2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_unreadable_session_files(
    good_session: Path, shared_tmp: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """``replay``, ``export`` and ``diff`` of a file that is not (or no longer) a readable
    session: one line that says what it is, a non-zero exit, no traceback (replay used to wait
    forever on a damaged page). The formats take turns over the kinds (each format's reader of
    each kind, in process: ``tests/test_session_fuzz.py``)."""
    user: OtherUser | None = None
    if kind == "no-permission" and IS_ROOT:  # root reads anything: its reader must not be root
        user = request.getfixturevalue("nobody")
    env = {"SOFA_TOP_DATA_DIR": str(shared_tmp / "data"), "HOME": str(shared_tmp)}
    good = shared_tmp / "good.sofa"
    shutil.copy(good_session, good)
    good.chmod(0o644)
    bad = make_broken(good, kind, shared_tmp / "broken")
    (shared_tmp / "broken").chmod(0o777)
    out = shared_tmp / "out"
    out.mkdir(mode=0o777)
    fmt = FORMATS[KINDS.index(kind) % len(FORMATS)]
    for argv in (
        ["replay", str(bad)],
        ["diff", str(good), str(bad)],
        ["export", str(bad), "-f", fmt, "-o", str(out / f"x.{fmt}")],
    ):
        line = one_line_error(sofa(*argv, user=user, env=env, timeout=60))
        assert line.startswith("sofa-top: ") and bad.name in line, (argv, line)
        assert any(w in line for w in expected_words(kind)), (argv, line)
    assert not os.listdir(out)  # no export, not even its temp file
    shutil.rmtree(shared_tmp / "broken", ignore_errors=True)


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
