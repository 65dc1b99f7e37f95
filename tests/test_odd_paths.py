"""Any path is a path: a session whose name holds '#', '?', '%', spaces, quotes, non-ASCII
letters, a leading '-', 'file:' or rich markup is recorded, replayed, exported, diffed, listed
and offered on the home screen like any other, and nothing writes a file the user did not name
(SQLite read ``DIR/run#2.sofa`` as the URI ``DIR/run`` with a fragment, and created that)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tui_pilot import run_async, wait_for

from sofa_top.cli.main import main
from sofa_top.cli.saved import resolve_session
from sofa_top.export import FORMATS
from sofa_top.recording.catalogue import list_sessions
from sofa_top.recording.paths import sessions_dir
from sofa_top.recording.replay import ReplaySource
from sofa_top.recording.report import session_summary
from sofa_top.recording.store import uri
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.home import HomeApp, HomeChoice

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
ISSUE_NAME = "run#2 ?%.sofa"
NAMES = (
    ISSUE_NAME,
    'it\'s a "quoted" run.sofa',
    "é 日本 données.sofa",
    "-lead.sofa",
    "file:x%41%2F.sofa",
    "a[b]*[bold red].sofa",
)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(1)"]


def sofa(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SOFA_TOP, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def companions(name: str) -> set[str]:
    """A session file and the side files SQLite keeps beside it."""
    return {name, f"{name}-wal", f"{name}-shm"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, object]]]:
    """The issue's own check: ``record --duration 3 --json -o 'DIR/run#2 ?%.sofa' -- CMD``."""
    d = tmp_path_factory.mktemp("dir")
    path = d / ISSUE_NAME
    proc = sofa("record", "--duration", "3", "--json", "-o", str(path), "--", *SLEEPER)
    assert proc.returncode == 0, proc.stderr
    yield path, json.loads(proc.stdout)


def test_the_issue_s_check(recorded: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    path, summary = recorded
    assert summary["session"] == str(path) and summary["exit_code"] == 0
    assert summary["end_reason"] == "target exited"
    out = tmp_path / "out.json"
    proc = sofa("export", str(path), "--format", "chrome", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["traceEvents"]
    assert set(os.listdir(path.parent)) <= companions(ISSUE_NAME)
    assert path.name in os.listdir(path.parent)


def test_the_uri_encodes_every_letter_sqlite_would_read() -> None:
    assert uri(Path("/d/run#2 ?%.sofa"), "ro") == "file:///d/run%232%20%3F%25.sofa?mode=ro"
    assert uri(Path("/d/é.sofa"), "rwc") == "file:///d/%C3%A9.sofa?mode=rwc"


def _arg(name: str) -> str:
    return f"./{name}" if name.startswith("-") else name


@pytest.mark.parametrize("name", NAMES)
def test_every_command_takes_the_name(
    recorded: tuple[Path, dict[str, object]],
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``export`` (each format, with and without ``-o``), ``diff``, the replay's source and the
    report, by relative and absolute path; ``--`` before a name that starts with '-'."""
    d = tmp_path / "d"
    d.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    path = d / name
    shutil.copy(recorded[0], path)
    monkeypatch.chdir(d)
    for arg in (_arg(name), str(path)):
        for fmt in FORMATS:  # -o an odd name too
            assert main(["export", arg, "--format", fmt, "-o", str(out / f"{name}.{fmt}")]) == 0
            assert (out / f"{name}.{fmt}").stat().st_size > 0
        capsys.readouterr()
        assert main(["diff", arg, str(path), "--json"]) == 0
        labels = json.loads(capsys.readouterr().out)
        assert (labels["a"], labels["b"]) == (str(Path(arg)), str(path))
        assert main(["diff", arg, str(path)]) == 0  # the table, its title the two paths
        assert resolve_session(arg).resolve() == path
    if name.startswith("-"):
        assert main(["export", "-f", "speedscope", "-o", str(out / "dash"), "--", name]) == 0
        assert main(["diff", "--json", "--", name, name]) == 0
    # without -o the export goes beside the session, under the session's own name
    assert main(["export", _arg(name), "-f", "chrome"]) == 0
    beside = path.with_name(path.stem + FORMATS["chrome"])
    assert beside.stat().st_size > 0
    capsys.readouterr()
    source = ReplaySource(Path(_arg(name)))
    try:
        assert source.snapshot().session_path == str(Path(_arg(name)))
    finally:
        source.stop()
    assert session_summary(path)["session"] == str(path)
    assert set(os.listdir(d)) <= companions(name) | {beside.name}


def test_an_option_like_name_is_one_clear_line(
    recorded: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    shutil.copy(recorded[0], tmp_path / "-x.sofa")
    proc = sofa("export", "-x.sofa", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sofa-top: "), proc.stderr
    assert "write ./-x.sofa" in lines[0]
    proc = sofa("record", "-o", "-y.sofa", "--", *SLEEPER, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "write ./-y.sofa" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["-x.sofa"]  # nothing recorded, nothing written


def test_record_to_a_leading_dash_non_ascii_name(tmp_path: Path) -> None:
    name = "-run é 日本#1.sofa"
    proc = sofa("record", "--duration", "3", "-o", f"./{name}", "--", *SLEEPER, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert name in proc.stdout  # the summary names the file
    assert set(os.listdir(tmp_path)) <= companions(name) and name in os.listdir(tmp_path)
    assert session_summary(tmp_path / name)["exit_code"] == 0


@pytest.fixture
def listed(recorded: tuple[Path, dict[str, object]]) -> list[Path]:
    """Every odd name in the sessions directory (the test's own: see conftest)."""
    root = sessions_dir()
    root.mkdir(parents=True)
    paths = [root / n for n in NAMES]
    for p in paths:
        shutil.copy(recorded[0], p)
    return paths


def test_sessions_and_the_catalogue_list_them(
    listed: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    infos = list_sessions()
    assert sorted(i.path for i in infos) == sorted(listed)
    assert all(i.error is None and i.duration_s for i in infos), [i.error for i in infos]
    assert main(["sessions", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["sessions"]
    assert sorted(e["path"] for e in entries) == sorted(str(p) for p in listed)
    assert all(e["error"] is None for e in entries)
    assert main(["sessions"]) == 0
    table = capsys.readouterr().out
    assert all(p.name in table for p in listed), table  # "[bold red]" shown, not applied
    # by name in the sessions directory: the name's '*', '?', '[' are its letters
    assert resolve_session("a[b]*[bold red]") == sessions_dir() / "a[b]*[bold red].sofa"
    assert resolve_session("run#2 ?%") == sessions_dir() / ISSUE_NAME


@run_async
async def test_the_home_screen_replays_an_odd_name(
    recorded: tuple[Path, dict[str, object]],
) -> None:
    root = sessions_dir()
    root.mkdir(parents=True)
    path = root / ISSUE_NAME
    shutil.copy(recorded[0], path)
    home = HomeApp(scan=list)
    async with home.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: home.sessions_loaded)
        await pilot.pause()
        await pilot.press("tab", "tab")
        assert home.focused is home.session_table
        await pilot.press("enter")
        await wait_for(lambda: home.return_value is not None)
    choice = home.return_value
    assert choice == HomeChoice.replay(path)
    assert choice is not None and choice.path is not None
    source = ReplaySource(resolve_session(str(choice.path)))  # what ``replay_path`` opens
    app = DashboardApp(source, refresh_s=1.0)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await wait_for(lambda: app.shown is not None)
            assert app.shown is not None and app.shown.session_path == str(path)
            assert "REPLAY" in app.header.render().plain
            await pilot.press("q")
            await wait_for(lambda: app.return_value is not None)
    finally:
        source.stop()
    assert app.return_value == str(path)
    assert set(os.listdir(root)) <= companions(ISSUE_NAME)
