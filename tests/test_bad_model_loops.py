"""The model-call clock on input it cannot time cleanly (``workloads/bad_model_loops.py``):
a clear ``steps.reason`` where there are no steps, no crash or stall of the workload, its
result unchanged, and no traceback from sofa-top."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, log_lines, run_cli, validate_record_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

pytest.importorskip("torch")

SCRIPT = str(WORKLOADS / "bad_model_loops.py")


def record(tmp_path: Path, case: str, seconds: str = "4") -> tuple[dict[str, Any], list[str]]:
    session = tmp_path / "s.sofa"
    cmd = [sys.executable, SCRIPT, "--case", case, "--seconds", seconds]
    proc = run_cli("record", "--json", "-o", str(session), "--", *cmd, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    validate_record_json(summary)
    lines = log_lines(session)
    assert summary["exit_code"] == 0, lines[-20:]
    assert "JOB DONE" in lines and not any("Traceback" in line for line in lines), lines[-20:]
    return summary, lines


def result(lines: list[str]) -> str:
    found = [m.group(1) for line in lines if (m := re.fullmatch(r"RESULT=(\S+)", line))]
    assert found, lines[-20:]
    return found[-1]


def test_a_model_called_from_several_threads_says_so(tmp_path: Path) -> None:
    """Four threads serve one model at once: no one loop's steps; the clock stops at once and
    says why (the few steps it may have marked first are left out)."""
    summary, _ = record(tmp_path, "threads")
    steps = summary["steps"]
    assert steps["count"] == 0, steps
    assert "torch-model-call" in steps["reason"] and "several threads" in steps["reason"], steps


def test_a_recursive_model_keeps_its_depth_and_its_steps(tmp_path: Path) -> None:
    """A model that recurses to within a few levels of Python's limit: the hook adds no frame
    per nested call (a frame more each and it would raise RecursionError); the outermost call
    of each iteration is its step, and the result is the one the script gets alone."""
    summary, lines = record(tmp_path, "recursion")
    alone = subprocess.run(
        [sys.executable, SCRIPT, "--case", "recursion", "--seconds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert alone.returncode == 0, alone.stderr
    assert result(lines) == result(alone.stdout.splitlines())
    steps = summary["steps"]
    assert steps["count"] > 10 and set(steps["sources"]) == {"torch-model-call"}, steps
    assert steps["phases"][0]["phase"] == "inference"


def test_a_model_in_dataloader_workers_is_their_input_work(tmp_path: Path) -> None:
    """The model runs in spawned workers' ``__getitem__`` (each its own agent): their calls
    are no steps; the loop's steps come from its DataLoader."""
    summary, _ = record(tmp_path, "worker", seconds="3")
    steps = summary["steps"]
    assert steps["count"] > 10 and set(steps["sources"]) == {"torch-dataloader"}, steps


def test_a_loop_with_no_model_says_it_called_none(tmp_path: Path) -> None:
    summary, _ = record(tmp_path, "nomodel")
    steps = summary["steps"]
    assert steps["count"] == 0 and "never called a model" in steps["reason"], steps
    # no CUDA hook's reason on a CPU job: the reasons are the step clocks'
    assert "cuda" not in steps["reason"].lower(), steps


def test_a_generator_fed_predict_has_inference_steps(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    summary, lines = record(tmp_path, "generator-predict")
    result(lines)
    steps = summary["steps"]
    assert steps["count"] > 10 and steps["phase"] == "inference", steps
    assert "train" not in summary["verdict"]["headline"], summary["verdict"]
