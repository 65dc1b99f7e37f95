"""End to end in a real terminal: the ``sofa-top`` console script under tmux, read back with
``capture-pane``, driven with ``send-keys``. Each test has its own tmux server (``-L``), killed
in a ``finally``; sessions go to the per-test ``SOFA_TOP_DATA_DIR`` (conftest)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import SOFA_TOP
from tmux_term import EXIT_MARK, Tmux, saved_session

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


def test_attach_reads_the_hot_function_and_cpu_then_q_saves_the_session(
    tmux: Tmux, busy_python: subprocess.Popen[bytes]
) -> None:
    tmux.start(f"{shlex.quote(SOFA_TOP)} attach {busy_python.pid}")

    def ready(screen: str) -> bool:
        return "spin_here" in screen and re.search(r"CPU .*?\d+% of \d+ cores?", screen) is not None

    screen = tmux.wait_for(ready, 60, "spin_here and a CPU figure")
    assert f"pid {busy_python.pid}" in screen
    assert re.search(r"spin_here\s+busy_python\.py:\d+", screen), screen
    cpu = re.search(r"CPU .*?(\d+)% of \d+ cores?", screen)
    assert cpu is not None and int(cpu.group(1)) >= 10, screen  # a busy loop shows up busy
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
    assert f"{EXIT_MARK} 0" in screen
    path = saved_session(screen)
    assert path.is_file() and path.stat().st_size > 0
    assert path.parent == Path(os.environ["SOFA_TOP_DATA_DIR"]) / "sessions"
    assert busy_python.poll() is None  # attaching never stops the target


def test_demo_torch_shows_input_bound_and_quit_asks_then_stops_the_workload(tmux: Tmux) -> None:
    tmux.start(f"{shlex.quote(SOFA_TOP)} demo torch --seconds 600")
    workload: psutil.Process | None = None
    try:
        # the verdict and its fix: the first verdicts may come from too little evidence to name
        # the framework (a generic fix), the later ones must name the DataLoader
        screen = tmux.wait_for(
            lambda s: "INPUT-BOUND" in s and "DataLoader(num_workers" in s,
            90,
            "the input-bound verdict with the DataLoader fix",
        )
        # the header's command line is cut to the terminal's width (a clone's path can be long)
        match = re.search(r"pid (\d+) \S*python", screen)
        assert match, screen
        workload = psutil.Process(int(match.group(1)))
        assert any(a.endswith("torch_input_bound.py") for a in workload.cmdline()), screen

        # Ctrl-C asks first and stops nothing when the answer is no.
        tmux.keys("C-c")
        tmux.wait_for(lambda s: "The workload is still running" in s, 60, "the quit question")
        tmux.keys("n")
        tmux.wait_for(
            lambda s: "The workload is still running" not in s, 60, "the question to close"
        )
        assert workload.is_running() and workload.status() != psutil.STATUS_ZOMBIE

        tmux.keys("q")
        tmux.wait_for(lambda s: "[y] stop & quit" in s, 60, "the quit question")
        tmux.keys("y")
        screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
        assert f"{EXIT_MARK} 0" in screen
        assert saved_session(screen).is_file()
        workload.wait(10)  # the CLI stopped and reaped it: wait() returns at once
        assert not workload.is_running()
    finally:
        if workload is not None and workload.is_running():
            workload.kill()  # only if the test failed midway: never leave the demo behind


def test_replay_of_a_recorded_session_in_a_real_terminal(tmux: Tmux, tmp_path: Path) -> None:
    from test_tui_replay import write_session

    path = tmp_path / "train.sofa"
    write_session(path)
    tmux.start(f"{shlex.quote(SOFA_TOP)} replay {shlex.quote(str(path))}")
    # the panes fill in over a few frames: wait for the whole end state, not its first part
    screen = tmux.wait_for(
        lambda s: all(
            m in s for m in ("REPLAY", "matmul_kernel", "COMPUTE-BOUND", "at 1:00 / 1:00")
        ),
        20,
        "the replay at the end",
    )
    tmux.keys("[", "[", literal=True)  # two verdict changes back
    screen = tmux.wait_for(lambda s: "at 0:05" in s, 60, "the cursor at the first change")
    assert "INPUT-BOUND" in screen and "load_batch" in screen
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
    assert f"{EXIT_MARK} 0" in screen
