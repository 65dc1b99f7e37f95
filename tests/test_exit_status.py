"""Exit statuses that tell: ``compare`` on a workload that fails stops at the baseline and says
why, or, without a baseline, exits 1 once every configuration failed; on one that runs it exits
0 (``test_sessions_grouped``); on Ctrl-C it exits 130 and the run it was in stops. ``record``
and ``launch`` are in ``test_differential.py`` and ``test_lifecycle_tmux.py``; signals to
sofa-top in ``faults/test_sofa_top_faults.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli, validate_compare_json

pytestmark = pytest.mark.timeout(300)

FAILS = (sys.executable, "-c", "import numpy\nimport no_such_module_sofa_top")


def test_compare_stops_at_a_failed_baseline(tmp_path: Path) -> None:
    r = run_cli(
        "compare", "--configs", "baseline,prefetch,xla", "--repeats", "2", "--json",
        "-o", str(tmp_path), "--", *FAILS,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("sofa-top: compare stopped: the baseline failed: exit code 1: ")
    assert "ModuleNotFoundError: No module named 'no_such_module_sofa_top'" in last
    result = json.loads(r.stdout)
    validate_compare_json(result)
    assert result["stopped"].startswith("the baseline failed: exit code 1")
    assert [run["config"] for run in result["runs"]] == ["baseline"]  # it stopped there
    assert len(list(tmp_path.glob("*.sofa"))) == 1  # one run, not 2 x 3


def test_compare_exits_1_when_every_configuration_failed(tmp_path: Path) -> None:
    r = run_cli(
        "compare", "--configs", "prefetch,xla", "--repeats", "1", "-o", str(tmp_path), "--",
        *FAILS,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "sofa-top: compare: every configuration failed (see errors)"
    )


def test_record_keep_running_leaves_the_workload_on_a_signal(tmp_path: Path) -> None:
    """``--keep-running``: SIGTERM ends sofa-top (143, the session final), not the workload,
    whose output goes on to the file sofa-top names."""
    import os
    import signal
    import subprocess

    import psutil
    from conftest import SOFA_TOP, WORKLOADS
    from procs import runs_script, wait_for

    from sofa_top.recording.reader import SessionReader

    out = tmp_path / "k.sofa"
    rec = subprocess.Popen(
        [SOFA_TOP, "record", "--keep-running", "-o", str(out), "--",
         sys.executable, str(WORKLOADS / "sleeper.py"), "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    workload: psutil.Process | None = None
    try:

        def started() -> bool:
            nonlocal workload
            kids = [p for p in psutil.Process(rec.pid).children() if runs_script(p, "sleeper.py")]
            workload = kids[0] if kids else None
            return workload is not None and out.exists()

        wait_for(started, 60, "the workload")
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=60)
        assert rec.returncode == 128 + signal.SIGTERM, err
        assert workload is not None and workload.is_running()
        assert f"the workload (PID {workload.pid}) keeps running; its output goes on to" in err
        meta = SessionReader(out).meta()
        assert meta["end_reason"] == "SIGTERM" and meta["stopped_job"] is False
    finally:
        if workload is not None and workload.is_running():
            os.kill(workload.pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("signame", "status"), [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)]
)
def test_compare_ctrl_c_exits_130_and_stops_the_run(
    tmp_path: Path, signame: str, status: int
) -> None:
    """Ctrl-C (or SIGTERM, or the terminal's SIGHUP) mid-run: 128 + N, no traceback, the run's
    workload stopped (no process of it left) and its session finalized as interrupted."""
    import signal
    import subprocess

    import psutil
    from conftest import SOFA_TOP, WORKLOADS
    from procs import wait_for

    from sofa_top.recording.reader import SessionReader

    loop = [sys.executable, str(WORKLOADS / "agent_torch.py"), "--mode", "input"]
    cmp = subprocess.Popen(
        # each run measures for 300 s: the signal lands in the baseline's, however slow the
        # machine is to show its processes
        [SOFA_TOP, "compare", "--configs", "baseline,prefetch", "--repeats", "1",
         "--seconds", "300", "-o", str(tmp_path), "--",
         *loop, "--workers", "2", "--seconds", "600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    job: list[psutil.Process] = []
    try:

        def running() -> bool:
            nonlocal job
            job = psutil.Process(cmp.pid).children(recursive=True)
            return len(job) >= 3 and any(tmp_path.glob("*.sofa"))  # the loop and 2 workers

        wait_for(running, 120, "the baseline's loop and its workers")
        cmp.send_signal(signal.Signals[signame])
        _, err = cmp.communicate(timeout=180)  # its run stops and its session is finalized
        assert cmp.returncode == status, err
        assert "Traceback" not in err
        left = [p for p in job if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert left == [], left
        (session,) = tmp_path.glob("*.sofa")  # it stopped there
        meta = SessionReader(session).meta()
        assert meta["end_reason"] == "interrupted" and meta["stopped_job"] is True, meta
    finally:
        if cmp.poll() is None:
            cmp.kill()
        for p in job:
            if p.is_running():
                p.kill()
