"""compare --like PID: re-runs a copy of a running job (its argv, working directory and
environment from /proc) after a confirmation; the running job is never touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli, validate_compare_json

from sofa_top.collectors.discovery import job_copy

JOB = """
import os, sys, time
from sofa_top.agent import api
open(f"ran-{os.environ['LIKE_MARK']}-{os.getpid()}", "w").close()
print("READY", flush=True)
def batches():
    while True:
        time.sleep(0.004)
        yield 1
for i, _ in enumerate(api.iterate(batches(), batch_size=4)):
    time.sleep(0.004)
"""


def _start(work: Path) -> subprocess.Popen[bytes]:
    (work / "job.py").write_text(JOB)
    proc = subprocess.Popen(
        [sys.executable, "job.py"],
        cwd=work,
        env={**os.environ, "LIKE_MARK": "copied-env"},
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"READY\n"
    return proc


def test_job_copy_reads_argv_cwd_and_environment(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        copy = job_copy(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert copy.cmd == (sys.executable, "job.py")
    assert copy.cwd == str(tmp_path)
    assert copy.env["LIKE_MARK"] == "copied-env"
    assert "SOFA_TOP_SOCKET" not in copy.env
    assert "shares this machine" in copy.describe() and "may write" in copy.describe()


def test_compare_like_runs_a_copy_and_leaves_the_job_alone(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    proc = _start(work)
    try:
        out = run_cli(
            "compare", "--like", str(proc.pid), "--yes", "--configs", "baseline",
            "--repeats", "1", "--steps", "10", "--json", "-o", str(tmp_path / "out"),
            timeout=180,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        validate_compare_json(result)
        (run,) = result["runs"]
        assert run["config"] == "baseline" and run["throughput"]["median"], run
        # the copy ran where the job runs, with its environment: its own marker file
        marks = sorted(p.name for p in work.glob("ran-copied-env-*"))
        assert len(marks) == 2 and f"ran-copied-env-{proc.pid}" in marks, marks
        assert proc.poll() is None  # untouched, still running
    finally:
        proc.kill()
        proc.wait()


def test_compare_like_asks_first(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        out = run_cli("compare", "--like", str(proc.pid), "--configs", "baseline")
        assert len(list(tmp_path.glob("ran-*"))) == 1
    finally:
        proc.kill()
        proc.wait()
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        f"sofa-top: compare --like {proc.pid} asks before re-running a copy: pass --yes"
    ]
