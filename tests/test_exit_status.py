"""Exit statuses that tell: ``compare`` on a workload that fails stops at the baseline and says
why, or, without a baseline, exits 1 once every configuration failed; on one that runs it exits
0 (``test_sessions_grouped``). ``record`` and ``launch`` are in ``test_differential.py`` and
``test_lifecycle_tmux.py``; signals to sofa-top in ``faults/test_sofa_top_faults.py``."""

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
