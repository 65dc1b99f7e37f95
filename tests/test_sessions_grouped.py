"""Sessions stay tidy: a real ``compare`` is one entry (its runs inside) in ``sessions``,
``sessions --json`` and the home screen; ``last`` is the user's own last session; every
session shows the script it ran; piped output is whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SOFA_TOP, WORKLOADS, run_cli
from test_tui_pilot import run_async, wait_for

from sofa_top.datamodel.command import command_text
from sofa_top.tui.home import HomeApp, HomeChoice

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.parametrize(
    ("cmdline", "shown"),
    [
        (("python", "train.py", "--epochs", "3"), "train.py --epochs 3"),
        (("/usr/bin/python3.11", "-u", "-X", "dev", "/work/x/train.py", "-v"), "train.py -v"),
        (("python3", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"),
         "-m torch.distributed.run --nproc_per_node=2 t.py"),
        (("python", "-c", "import x\nx.run()"), "-c import x x.run()"),
        (("/bin/sh", "-c", "make train"), "sh -c make train"),
        (("python3",), "python3"),
        ((), ""),
    ],
)  # fmt: skip
def test_a_command_line_reads_as_the_script(cmdline: tuple[str, ...], shown: str) -> None:
    assert command_text(cmdline) == shown


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One user session (``record`` of a script with arguments), then a real comparison of two
    configurations, two runs each (no more at any noise: ``--max-repeats 2``), in one data
    directory."""
    d = tmp_path_factory.mktemp("grouped")
    env = {"SOFA_TOP_DATA_DIR": str(d)}
    script = str(WORKLOADS / "torch_seeded.py")
    mine = run_cli("record", "--", sys.executable, script, "--epochs", "2", env=env, timeout=240)
    assert mine.returncode == 0, mine.stderr
    compare = run_cli(
        "compare", "--configs", "baseline,prefetch", "--repeats", "2", "--max-repeats", "2",
        "--steps", "10", "--warmup-steps", "2", "--parallelism", "1", "--",
        sys.executable, script, "--epochs", "30",
        env=env, timeout=480,
    )  # fmt: skip
    assert compare.returncode == 0, compare.stderr
    return d


def test_a_compare_is_one_entry_with_its_runs(data_dir: Path) -> None:
    env = {"SOFA_TOP_DATA_DIR": str(data_dir)}
    files = sorted((data_dir / "sessions").glob("*.sofa"))
    assert len(files) == 5  # the user's session and four runs
    r = run_cli("sessions", "--json", env=env)
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)["sessions"]
    assert [e["kind"] for e in entries] == ["compare", "session"]  # newest first
    compare, mine = entries
    assert compare["command"] == "torch_seeded.py --epochs 30"
    assert mine["command"] == "torch_seeded.py --epochs 2"
    runs = compare["runs"]
    assert len(runs) == 4 and {r["run"] for r in runs} == {
        "baseline-1", "baseline-2", "prefetch-1", "prefetch-2"
    }  # fmt: skip
    assert runs[0]["run"] == "baseline-1"  # the first run first
    assert all(r["command"] == compare["command"] for r in runs)


def test_last_is_the_users_own_session(data_dir: Path) -> None:
    from sofa_top.cli.saved import resolve_session

    old = os.environ.get("SOFA_TOP_DATA_DIR")
    os.environ["SOFA_TOP_DATA_DIR"] = str(data_dir)
    try:
        last = resolve_session("last")
        last_compare = resolve_session("last-compare")
    finally:
        os.environ["SOFA_TOP_DATA_DIR"] = old or ""
    assert not last.name.startswith("compare-")
    assert last_compare.name.endswith("-baseline-1.sofa")


def test_piped_sessions_are_whole(data_dir: Path) -> None:
    r = subprocess.run(
        [SOFA_TOP, "sessions"],
        capture_output=True,
        text=True,
        env={**os.environ, "SOFA_TOP_DATA_DIR": str(data_dir), "COLUMNS": "80"},
        timeout=60,
    )  # a pipe, not a terminal: no width to fit
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    lines = [ln for ln in r.stdout.splitlines() if "torch_seeded.py" in ln]
    assert len(lines) == 2, r.stdout  # each entry on one line, whole
    assert any("compare (4 runs): torch_seeded.py --epochs 30" in ln for ln in lines)
    names = [p.name for p in (data_dir / "sessions").glob("*.sofa") if "compare" not in p.name]
    assert names[0] in r.stdout  # the file name, not cut to "compare-20…"


@run_async
async def test_the_home_screen_shows_a_compare_as_one_row(data_dir: Path) -> None:
    from sofa_top.recording.catalogue import list_sessions

    app = HomeApp(scan=lambda: [], sessions=lambda: list_sessions(data_dir / "sessions"))
    async with app.run_test(size=(140, 30)) as pilot:
        await wait_for(lambda: app.sessions_loaded)
        await pilot.pause()
        table = app.session_table
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert len(rows) == 2, rows  # the user's session and the comparison: one row each
        assert rows[0][1].startswith("compare (4 runs)"), rows
        assert rows[1][1].startswith("torch_seeded.py --epoch"), rows  # cut to its column
        await pilot.press("tab", "tab")
        await pilot.press("enter")  # the comparison: its first run, the baseline
        await wait_for(lambda: app.return_value is not None)
    choice = app.return_value
    assert isinstance(choice, HomeChoice) and choice.path is not None
    assert choice.path.name.endswith("-baseline-1.sofa")
