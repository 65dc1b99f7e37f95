"""Loops that fail the way real ones do: one clear reason, the workload's exit code, no
traceback from sofa-top, and nothing recorded lost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    CTRL_C,
    WORKLOADS,
    log_lines,
    record_until_judged,
    run_cli,
    validate_record_json,
)

from sofa_top.cli.exits import workload_status

pytestmark = pytest.mark.timeout(300)


def record(tmp_path: Path, *cmd: str) -> tuple[dict[str, Any], list[str]]:
    session = tmp_path / "s.sofa"
    proc = run_cli("record", "--json", "-o", str(session), "--", *cmd, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr  # the workload's traceback is its own
    summary = json.loads(proc.stdout)
    validate_record_json(summary)
    # sofa-top recorded the failure, and exits as the workload did: a CI job sees it failed
    assert proc.returncode == workload_status(summary["exit_code"]) != 0, proc.stderr
    return summary, log_lines(session)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "error", "source"),
    [
        ("lying-length", "IndexError: index 1024 is out of bounds", "torch-dataloader"),
        ("worker-raises", "ValueError: corrupt sample 700", "torch-dataloader"),
        ("generator-ends", "StopIteration", "torch-model-call"),
    ],
)
def test_a_loop_that_fails_keeps_its_steps_and_says_why(
    tmp_path: Path, case: str, error: str, source: str
) -> None:
    pytest.importorskip("torch")
    summary, lines = record(
        tmp_path, sys.executable, str(WORKLOADS / "bad_loops.py"), "--case", case
    )
    assert summary["exit_code"] == 1
    assert summary["workload_error"] is not None and error in summary["workload_error"]
    assert "Traceback (most recent call last):" in lines  # the workload's own, in the session
    # the steps before the failure are all there, from the loop's clock
    steps = summary["steps"]
    assert steps["count"] > 10 and steps["sources"].get(source, 0) > 10, steps
    verdict = summary["verdict"]
    assert verdict["kind"] != "unknown"
    assert (
        f"the workload failed with exit code 1: {summary['workload_error']}" in verdict["headline"]
    )
    assert verdict["evidence"]["workload_error"] == summary["workload_error"]


def test_a_script_that_fails_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_train.py"
    summary, _ = record(tmp_path, sys.executable, str(missing))
    assert summary["exit_code"] == 2
    assert "can't open file" in summary["workload_error"]
    assert summary["steps"]["count"] == 0
    reason = summary["steps"]["reason"]
    assert reason.startswith("the workload exited with code 2 before any step: ")
    assert "can't open file" in reason
    verdict = summary["verdict"]
    assert verdict["kind"] == "unknown" and reason == verdict["evidence"]["steps_reason"]
    # the headline is the failure, its error line whole
    error = summary["workload_error"]
    assert verdict["headline"] == f"unknown: the workload failed (exit code 2): {error}"
    # a next step that is possible: not "run it under launch" (it ran under the agent)
    assert verdict["recommendations"] and not any("launch" in r for r in verdict["recommendations"])


def test_a_launched_loop_no_hook_sees_says_why(tmp_path: Path) -> None:
    """A plain-Python loop under the agent: no steps and why; the stacks still judge it (the
    loop runs until the stacks have judged, then Ctrl-C)."""
    loop = (sys.executable, str(WORKLOADS / "busy_python.py"), "600")
    proc = record_until_judged(tmp_path / "s.sofa", "--", *loop)
    assert proc.returncode == CTRL_C, proc.stderr
    summary = json.loads(proc.stdout)
    validate_record_json(summary)
    steps = summary["steps"]
    assert steps["count"] == 0
    why = "no step measured: the workload imported neither TensorFlow nor PyTorch"
    assert steps["reason"] == why
    verdict = summary["verdict"]
    assert verdict["kind"] == "python-overhead", verdict
    assert verdict["evidence"]["steps_reason"] == why
    assert "launch" not in " ".join(verdict["recommendations"])


def test_attach_mode_unknown_says_it_is_attached(tmp_path: Path, busy_python: Any) -> None:
    """Attached without the agent: the reason names the mode, and launching is the next step.
    With the agent injected, the reason is what the agent saw (the same as launched)."""
    proc = run_cli(
        "record", "--pid", str(busy_python.pid), "--duration", "3", "--json", "--no-inject",
        "-o", str(tmp_path / "a.sofa"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["steps"]["reason"].startswith("no step telemetry in record mode, attached")
    injected = run_cli(
        "record", "--pid", str(busy_python.pid), "--duration", "3", "--json",
        "-o", str(tmp_path / "i.sofa"),
    )  # fmt: skip
    assert injected.returncode == 0, injected.stderr
    summary = json.loads(injected.stdout)
    if summary["injected"]:
        why = "no step measured: the workload imported neither TensorFlow nor PyTorch"
        assert summary["steps"]["reason"] == why
