"""Input-bound verdicts name their cause, on real workloads of both shapes in both frameworks.

``tests/workloads/input_shapes_{tf,torch}.py`` run a serial input stage that either burns CPU
(an FFT and matmuls per element) or waits (a 4-5 ms sleep per element, as a slow read would).
The verdict must tell them apart from what the producers' threads did (the scheduler's
accounting: the loop's thread around each fetch, tf.data's threads over the window).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import WORKLOADS, run_cli

from sofa_top.recording.reader import SessionReader

pytestmark = pytest.mark.slow  # real TensorFlow and PyTorch workloads


@pytest.mark.parametrize("framework", ["tf", "torch"])
@pytest.mark.parametrize("shape", ["cpu", "latency"])
def test_verdict_names_the_input_cause(tmp_path: Path, framework: str, shape: str) -> None:
    out = tmp_path / "s.sofa"
    script = str(WORKLOADS / f"input_shapes_{framework}.py")
    proc = run_cli(
        "record", "--json", "-o", str(out), "--",
        sys.executable, script, "--shape", shape, "--seconds", "8",
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)["verdict"]
    ev = verdict["evidence"]
    assert verdict["kind"] == "input-bound", verdict
    # from the scheduler's accounting of the producers' threads; a CPU-bound stage that other
    # processes starve of the cores reads as contention (this machine is shared)
    causes = {"cpu": ("cpu", "contention"), "latency": ("latency",)}[shape]
    assert ev["input_cause"] in causes and ev["input_cause_source"] == "schedstat", ev
    if ev["input_cause"] == "contention":
        assert ev["others_cores"] >= 0.5 and ev["neighbours"], ev
    assert ev["input_parallelism"] == 1  # the workloads' input stages are serial
    split = ev["input_time_split"]
    assert split["blocked"] >= 0.6 if shape == "latency" else split["blocked"] < 0.4, split
    words = {
        "cpu": "CPU-bound preprocessing",
        "contention": "waits for a CPU that other processes hold",
        "latency": "waits on I/O",
    }[ev["input_cause"]]
    assert words in verdict["headline"]
    recs = " | ".join(verdict["recommendations"])
    if shape == "latency":
        # waiting workers can outnumber the cores: the advice goes past the core count
        assert ("num_workers=16" if framework == "torch" else "private_threadpool_size") in recs
    # the per-step measures behind it are stored, step by step: the process's CPU during each
    # wait, and the loop thread's own time on a CPU and waiting for one
    steps = SessionReader(out).steps()
    measured = [s for s in steps if s.wait_cpu_s is not None and s.wait_queue_s is not None]
    assert len(measured) >= 0.9 * len(steps) > 10
    wait = sum(s.input_wait_s for s in measured)
    if framework == "torch":  # the DataLoader loads in the loop's thread: its time is the stage's
        runnable = sum((s.wait_run_s or 0.0) + (s.wait_queue_s or 0.0) for s in measured) / wait
        assert (runnable > 0.6) if shape == "cpu" else (runnable < 0.4), runnable
    elif shape == "latency":  # tf.data's threads load; the process barely uses a CPU meanwhile
        assert sum(s.wait_cpu_s or 0.0 for s in measured) / wait < 0.4
