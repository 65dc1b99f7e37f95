"""Input-bound verdicts name their cause, on real workloads of both shapes in both frameworks.

``tests/workloads/input_shapes_{tf,torch}.py`` run a serial input stage that either burns CPU
(an FFT and matmuls per element) or waits (a 4-5 ms sleep per element, as a slow read would).
The agent measures the process's CPU during each input wait; the verdict must tell them apart.
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
    assert (ev["input_cause"], ev["input_cause_source"]) == (shape, "agent"), ev
    assert ev["input_parallelism"] == 1  # the workloads' input stages are serial
    words = {"cpu": "CPU-bound preprocessing", "latency": "waits on I/O"}[shape]
    assert words in verdict["headline"]
    recs = " | ".join(verdict["recommendations"])
    if shape == "latency":
        # waiting workers can outnumber the cores: the advice goes past the core count
        assert ("num_workers=16" if framework == "torch" else "private_threadpool_size") in recs
    # the per-step measure behind it is stored, step by step
    steps = SessionReader(out).steps()
    measured = [s for s in steps if s.wait_cpu_s is not None]
    assert len(measured) >= 0.9 * len(steps) > 10
    busy = sum(s.wait_cpu_s or 0.0 for s in measured) / sum(s.input_wait_s for s in measured)
    assert (busy > 0.5) if shape == "cpu" else (busy < 0.4), busy
