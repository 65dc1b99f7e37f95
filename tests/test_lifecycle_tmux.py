"""A launched job's life under a real terminal (tmux): ``launch`` exits with the workload's
status, the dashboard heads with a failed workload's error as it exits, closing the terminal
ends the job (``--keep-running`` and the quit dialog's "detach" leave it running), and every
way out leaves a final session file."""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import SOFA_TOP, WORKLOADS
from procs import wait_until
from tmux_term import EXIT_MARK, Tmux

from sofa_top.recording.reader import SessionReader

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

JOB_GONE_S = 15.0  # the bound: no process of the job left after the terminal closed


def launch(tmux: Tmux, session: Path, *cmd: str, flags: tuple[str, ...] = ()) -> None:
    argv = [SOFA_TOP, "launch", "-o", str(session), *flags, "--", *cmd]
    tmux.start(" ".join(shlex.quote(a) for a in argv))


def job(tmux: Tmux, script: str) -> list[psutil.Process]:
    """The workload's processes (the script and its DataLoader workers): the pane's
    descendants whose command line runs ``script``."""
    pane = psutil.Process(int(tmux.tmux("list-panes", "-F", "#{pane_pid}").split()[0]))
    out = []
    for p in pane.children(recursive=True):
        try:
            if any(a.endswith(script) for a in p.cmdline()[1:2]):  # python SCRIPT ...
                out.append(p)
        except psutil.Error:
            continue
    return out


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def final_meta(session: Path) -> dict[str, object]:
    """The session's metadata once it is finalized (``ended`` set), within 30 s."""
    meta: dict[str, object] = {}

    def ended() -> bool:
        nonlocal meta
        try:
            meta = SessionReader(session).meta()
        except Exception:
            return False
        return "ended" in meta

    assert wait_until(ended, 30), f"{session} never finalized: {meta}"
    return meta


def test_a_failed_launch_heads_with_its_error_and_exits_with_its_status(
    tmux: Tmux, tmp_path: Path
) -> None:
    died = tmp_path / "died"
    code = (
        "import pathlib, time\n"
        "time.sleep(1)\n"
        f"pathlib.Path({str(died)!r}).write_text(repr(time.time()))\n"
        "import no_such_module_sofa_top\n"
    )
    launch(tmux, tmp_path / "f.sofa", sys.executable, "-c", code)
    seen = 0.0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        screen = tmux.screen()
        if "ModuleNotFoundError" in screen and "failed (exit code 1)" in screen:
            seen = time.time()
            break
        time.sleep(0.05)
    assert seen, f"no failure headline; screen:\n{tmux.screen()}"
    assert "judging" not in screen and "agent never connected" not in screen, screen
    took = seen - float(died.read_text())
    print(f"failure on screen {took:.2f} s after the workload's last line")
    # drawn from the exit's own snapshot, not a judgement cycle later (the 1 s target is
    # benchmarks/latency.py's failure-headline; this bound holds beside a CPU hog)
    assert took <= 5.0, took
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
    assert f"{EXIT_MARK} 1" in screen  # the workload's own exit status


def test_a_launch_that_succeeds_exits_0(tmux: Tmux, tmp_path: Path) -> None:
    launch(tmux, tmp_path / "ok.sofa", sys.executable, "-c", "print('trained')")
    tmux.wait_for(lambda s: "target exited (code 0)" in s, 90, "the exit banner")
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
    assert f"{EXIT_MARK} 0" in screen


def _start_job(tmux: Tmux, session: Path, flags: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Launch a DataLoader loop with two workers; its processes once all three run."""
    script = "agent_torch.py"
    cmd = (sys.executable, str(WORKLOADS / script), "--mode", "input", "--workers", "2")
    launch(tmux, session, *cmd, "--seconds", "600", flags=flags)
    found: list[psutil.Process] = []

    def three() -> bool:
        nonlocal found
        found = alive(job(tmux, script))
        return len(found) >= 3

    assert wait_until(three, 120), f"the job's processes: {found}"
    tmux.wait_for(lambda s: "steps" in s.lower(), 60, "the dashboard")
    return found


def test_closing_the_terminal_ends_the_launched_job(tmux: Tmux, tmp_path: Path) -> None:
    session = tmp_path / "hup.sofa"
    procs = _start_job(tmux, session)
    try:
        tmux.tmux("kill-session")  # the pane closes: SIGHUP to sofa-top
        closed = time.monotonic()
        assert wait_until(lambda: not alive(procs), JOB_GONE_S), alive(procs)
        print(f"job gone {time.monotonic() - closed:.1f} s after the terminal closed")
        meta = final_meta(session)
        assert meta["end_reason"] == "SIGHUP" and meta["stopped_job"] is True, meta
    finally:
        for p in alive(procs):
            p.kill()


def test_keep_running_leaves_the_job_when_the_terminal_closes(tmux: Tmux, tmp_path: Path) -> None:
    session = tmp_path / "keep.sofa"
    procs = _start_job(tmux, session, flags=("--keep-running",))
    try:
        tmux.tmux("kill-session")
        meta = final_meta(session)  # finalized all the same
        assert meta["end_reason"] == "SIGHUP" and meta["stopped_job"] is False, meta
        assert len(alive(procs)) == len(procs)  # and the job runs on
    finally:
        for p in alive(procs):
            p.kill()


def test_the_quit_dialog_can_detach(tmux: Tmux, tmp_path: Path) -> None:
    session = tmp_path / "detach.sofa"
    procs = _start_job(tmux, session)
    try:
        tmux.keys("q")
        tmux.wait_for(lambda s: "[d] detach: leave it running" in s, 60, "the quit question")
        tmux.keys("d")
        screen = tmux.wait_for(lambda s: EXIT_MARK in s, 60, "sofa-top to exit")
        assert f"{EXIT_MARK} 0" in screen
        assert f"(PID {procs[0].pid}) keeps running" in screen or "keeps running" in screen
        meta = final_meta(session)
        assert meta["end_reason"] == "user detached" and meta["stopped_job"] is False, meta
        assert len(alive(procs)) == len(procs)
    finally:
        for p in alive(procs):
            p.kill()
