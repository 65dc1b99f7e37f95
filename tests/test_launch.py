"""Launch mode through the real CLI (`sofa-top record -- CMD`): real TensorFlow and PyTorch
workloads that measure their own input fraction; sofa-top's figure must agree within 0.10 and
the verdict must match. Also attach-mode verdicts from stacks, and the workload's fate when
things go wrong.

The launch recordings are the session's shared ones (``recordings.SHAPES``, recorded once by the
real CLI); the agent tests assert on the same sessions.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    CTRL_C,
    SOFA_TOP,
    WORKLOADS,
    record_until_judged,
    run_cli,
    validate_record_json,
)
from procs import spawned
from recordings import Recordings

from sofa_top.analysis.verdicts import HIGH_INPUT_FRACTION
from sofa_top.cli.exits import workload_status
from sofa_top.recording.reader import SessionReader

TOLERANCE = 0.10


def _record(tmp_path: Path, *cmd: str, timeout: float = 240) -> tuple[dict[str, object], Path]:
    out = tmp_path / "s.sofa"
    proc = run_cli("record", "--json", "-o", str(out), "--", sys.executable, *cmd, timeout=timeout)
    summary = json.loads(proc.stdout)
    validate_record_json(summary)
    code = summary["exit_code"]
    # record exits as the workload did
    assert proc.returncode == workload_status(code if isinstance(code, int) else None), proc.stderr
    return summary, out


CASES = [
    ("tf-eager input next", "input-bound"),
    ("tf-eager compute next", "compute-bound"),
    ("tf-eager input for", "input-bound"),
    ("tf-eager compute for", "compute-bound"),
    ("keras fit input", "input-bound"),
    ("keras fit compute", "compute-bound"),
    ("torch input", "input-bound"),
    ("torch compute", "compute-bound"),
]


@pytest.mark.slow
@pytest.mark.parametrize("shape, verdict", CASES, ids=[c[0] for c in CASES])
def test_input_fraction_matches_the_workloads_own(
    recordings: Recordings, shape: str, verdict: str
) -> None:
    rec = recordings.get(shape)
    own = rec.value("SELF_INPUT_FRACTION")
    steps = [s for s in rec.steps() if s.step >= rec.warmup]  # the steps the workload timed
    assert len(steps) >= 10, f"only {len(steps)} steps recorded: {rec.describe()}"
    measured = sum(s.input_wait_s for s in steps) / sum(s.duration_s for s in steps)
    assert measured == pytest.approx(own, abs=TOLERANCE), (shape, measured, own)
    assert rec.exit_code == 0
    v = rec.summary["verdict"]
    if verdict == "input-bound":
        assert own >= HIGH_INPUT_FRACTION, own  # the workload is what its case claims
        assert (v["kind"], v["severity"]) == ("input-bound", "high"), v
    else:
        # A compute-bound workload with tiny steps can still wait 5-20% for input on this
        # machine: never input-bound (input leads from 20%). On a loaded machine other
        # processes may hold the cores its pool wants: then they, not its pool, are named.
        assert own < HIGH_INPUT_FRACTION, own
        assert v["kind"] == "compute-bound" or (
            v["kind"] == "cpu-oversubscribed"
            and v["evidence"]["oversubscribed_by"] in ("neighbours", "both")
        ), v


@pytest.mark.slow
def test_torch_loop_without_a_dataloader_gets_step_times(recordings: Recordings) -> None:
    """No DataLoader: the steps come from the model's calls, and their times are the loop's."""
    rec = recordings.get("torch optimizer")
    steps = rec.steps()
    assert len(steps) >= 20 and {s.source for s in steps} == {"torch-model-call"}
    assert rec.summary["steps"]["count"] == len(steps)
    # agent step n runs from the end of iteration n to n + 1: steps WARMUP-1.. cover those
    # the workload timed (WARMUP..); compare the same statistic over the same steps
    own_ms = rec.value("SELF_STEP_MS")
    agent_ms = statistics.fmean(s.duration_s for s in steps[rec.warmup - 1 :]) * 1e3
    assert agent_ms == pytest.approx(own_ms, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["agent_tf_eager.py", "agent_torch.py"])
def test_attach_mode_verdict_from_stacks(tmp_path: Path, script: str) -> None:
    """No agent: the verdict comes from which class the training thread's stacks are in. The
    loop runs until the test is done with it, and is attached to once it is past its warm-up;
    the recording stops once the stacks have judged."""
    argv = [sys.executable, str(WORKLOADS / script), "--mode", "input", "--seconds", "600"]
    with spawned(argv, ready=b"READY", stderr=subprocess.DEVNULL) as work:
        # --no-inject: from outside, what an attach that could not inject gets
        proc = record_until_judged(tmp_path / "a.sofa", "--pid", str(work.pid), "--no-inject")
        assert work.poll() is None  # attaching never stops the target
    assert proc.returncode == CTRL_C, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["end_reason"] == "SIGINT"
    verdict = summary["verdict"]
    assert verdict["kind"] == "input-bound", verdict
    assert verdict["evidence"]["source"] == "stacks"


def test_crash_keeps_exit_code_and_last_output(tmp_path: Path) -> None:
    summary, path = _record(
        tmp_path, "-c", "import sys; print('about to fail', flush=True); raise RuntimeError('boom')"
    )
    assert summary["exit_code"] == 1
    logs = [(e.data["stream"], e.message) for e in SessionReader(path).events("log")]
    assert ("stdout", "about to fail") in logs
    assert ("stderr", "RuntimeError: boom") in logs


def test_exit_code_of_a_normal_and_a_failing_workload(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert _record(tmp_path / "a", "-c", "pass")[0]["exit_code"] == 0
    assert _record(tmp_path / "b", "-c", "raise SystemExit(5)")[0]["exit_code"] == 5


_KILL_SCENARIO = """
import ctypes, json, os, signal, subprocess, sys, time
from pathlib import Path
import psutil
from sofa_top.recording.reader import SessionReader
# Become a subreaper so the orphaned workload is re-parented to us and we can read its code.
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0
sofa_top, out, code, finish = sys.argv[1:5]
rec = subprocess.Popen([sofa_top, "record", "-o", out, "--", sys.executable, "-c", code],
                       stderr=subprocess.DEVNULL)
def logged():
    try:
        return len(SessionReader(Path(out)).events("log"))
    except Exception:
        return 0
deadline = time.monotonic() + 60
while logged() < 3:  # the workload is running and sofa-top records its output
    assert time.monotonic() < deadline, "no output recorded within 60 s"
    time.sleep(0.05)
def is_workload(p):  # argv, not a substring: a forked, not yet exec'd child shows sofa-top's
    try:
        return p.cmdline()[1:2] == ["-c"]
    except psutil.Error:
        return False
(workload,) = [p for p in psutil.Process(rec.pid).children() if is_workload(p)]
stdout_file = os.readlink(f"/proc/{workload.pid}/fd/1")
socket = workload.environ().get("SOFA_TOP_SOCKET", "")
os.kill(rec.pid, signal.SIGKILL)
rec.wait()
Path(finish).touch()  # only now may the workload end its loop
_, status = os.waitpid(workload.pid, 0)
print(json.dumps({"exit_code": os.waitstatus_to_exitcode(status), "stdout_file": stdout_file,
                  "stdout": Path(stdout_file).read_text(), "socket": socket}))
"""


def test_sofa_top_killed_mid_run_leaves_the_workload_alone(tmp_path: Path) -> None:
    """SIGKILL sofa-top while the workload runs: the workload finishes its loop (printing all
    the while, after the kill too) and exits with its own code."""
    marker = tmp_path / "done"
    finish = tmp_path / "finish"
    code = (
        "import time, pathlib\n"
        "i = 0\n"
        f"while not pathlib.Path({str(finish)!r}).exists():\n"
        "    print('step', i, flush=True); i += 1; time.sleep(0.05)\n"
        "for j in range(5):\n"
        "    print('after', j, flush=True)\n"
        f"pathlib.Path({str(marker)!r}).write_text('ok')\n"
        "raise SystemExit(4)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_SCENARIO, SOFA_TOP, str(tmp_path / "k.sofa"), code, finish],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["exit_code"] == 4
    assert marker.read_text() == "ok"
    lines = result["stdout"].splitlines()
    assert lines[0] == "step 0" and lines[-5:] == [f"after {j}" for j in range(5)]
    # What was recorded before the kill is readable.
    assert SessionReader(tmp_path / "k.sofa").events("log")
    # a SIGKILLed sofa-top cannot clean up its output and agent-socket directories
    shutil.rmtree(Path(result["stdout_file"]).parent, ignore_errors=True)
    if result["socket"]:
        shutil.rmtree(Path(result["socket"]).parent, ignore_errors=True)


def test_launch_bad_commands(tmp_path: Path) -> None:
    proc = run_cli("record", "-o", str(tmp_path / "x.sofa"), "--", "no-such-command-xyz")
    assert proc.returncode != 0 and "command not found: no-such-command-xyz" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli("launch")
    assert proc.returncode != 0 and "launch needs a command" in proc.stderr
    proc = run_cli("record", "--pid", "1", "--", "true")
    assert proc.returncode != 0 and "not both" in proc.stderr
