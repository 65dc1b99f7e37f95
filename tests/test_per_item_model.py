"""Loops the model-call clock and the host split must read as the user wrote them, under the
real ``sofa-top record --json`` (no ``--duration``: it ends with the script):

- a function that builds the network, loads its weights and runs it, called per input file
  (``workloads/per_item_model.py``, 40 files): one loop of 39 steps, whose model is a new
  object each time; building and loading are the steps' setup, not their input (and the
  same with Keras: ``load_weights``, ``predict_on_batch``);
- a generation loop that reads nothing (``workloads/generate_loop.py``): every line after the
  model call works on its output and feeds it back; its input share is nil.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, log_lines, run_cli, validate_record_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

pytest.importorskip("torch")


def record(tmp_path: Path, script: str, *args: str) -> tuple[dict[str, Any], list[str]]:
    session = tmp_path / "s.sofa"
    cmd = [sys.executable, str(WORKLOADS / script), *args]
    proc = run_cli("record", "--json", "-o", str(session), "--", *cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    validate_record_json(summary)
    lines = log_lines(session)
    assert summary["exit_code"] == 0, lines[-20:]
    return summary, lines


def truth(lines: list[str]) -> dict[str, float]:
    found = [json.loads(line) for line in lines if line.startswith('{"loop"')]
    assert found, lines[-20:]
    return found[-1]  # type: ignore[no-any-return]


def test_a_model_rebuilt_per_file_is_one_loop(tmp_path: Path) -> None:
    """The lead model is followed by its class and call site: 39 steps (a new model object
    each), not "the model was called once"; its construction and weight loading are setup."""
    summary, lines = record(tmp_path, "per_item_model.py")
    own = truth(lines)
    steps = summary["steps"]
    assert own["loop"] == 39 and steps["count"] >= 30, steps
    assert set(steps["sources"]) == {"torch-model-call"} and steps["reason"] is None, steps
    split = steps["host_split"]
    assert split is not None and split["setup"] >= 0.3, (split, own)
    # the input share is the file's preprocessing, not the model's building
    build_share = own["build"] / (own["build"] + own["prep"])
    assert split["input"] < build_share, (split, own)
    verdict = summary["verdict"]
    if verdict["kind"] == "compute-bound":  # (unsplit under a starved sampler: input-bound)
        recs = " | ".join(verdict["recommendations"])
        assert "build the model once, outside the loop" in recs, verdict


def test_a_generation_loop_that_reads_nothing_has_no_input(tmp_path: Path) -> None:
    summary, _ = record(tmp_path, "generate_loop.py", "--seconds", "12")
    steps = summary["steps"]
    assert steps["sources"].get("torch-model-call", 0) > 50, steps
    split = steps["host_split"]
    assert split is not None and split["input"] <= 0.05, split
    assert split["output"] >= 0.8, split


def test_a_keras_model_rebuilt_per_file_is_one_loop(tmp_path: Path) -> None:
    """The same with Keras: the model built, ``load_weights`` and ``predict_on_batch`` per file."""
    pytest.importorskip("tensorflow")
    summary, lines = record(tmp_path, "per_item_model.py", "--keras")
    assert truth(lines)["loop"] == 39
    steps = summary["steps"]
    assert steps["count"] >= 30 and set(steps["sources"]) == {"keras-model-call"}, steps
    split = steps["host_split"]
    assert split is not None and split["setup"] >= split["input"], split
