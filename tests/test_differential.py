"""The agent changes nothing a program does: each workload runs without sofa-top and under
``sofa-top record``, and both runs end the same way (exit status, the error's type, the last
loss logged). The workloads here are the suite's cheap ones, failing and succeeding; the sweep
over every test workload and corpus script is ``benchmarks/differential.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import WORKLOADS
from differential import Outcome, clean_env, run_plain, run_recorded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PY = sys.executable
# each case: its command, how it must end (None: it trains, to a logged loss) and the step
# clock that must have measured it under sofa-top (None: it fails before a step)
CASES: dict[str, tuple[list[str], Outcome | None, str | None]] = {
    # keras-io's 3D image classification: a tf.numpy_function map, no static shape. Keras
    # traces its train function on the iterator's get_next() and the first layer fails.
    "keras unknown shape": (
        [PY, str(WORKLOADS / "keras_unknown_shape.py")],
        Outcome(1, "ValueError", None),
        None,
    ),
    "keras unknown shape spe=4": (
        [PY, str(WORKLOADS / "keras_unknown_shape.py"), "--steps-per-execution", "4"],
        Outcome(1, "ValueError", None),
        None,
    ),
    "keras static shape": (
        [PY, str(WORKLOADS / "keras_unknown_shape.py"), "--static"],
        None,
        "keras-fit",
    ),
    "keras static shape spe=3": (
        [PY, str(WORKLOADS / "keras_unknown_shape.py"), "--static", "--steps-per-execution", "3"],
        None,
        "keras-fit",
    ),
    # the first fit without op determinism (the timer's clock is tf.timestamp), the second
    # with it (TensorFlow refuses to run tf.timestamp then)
    "keras determinism after a fit": (
        [PY, str(WORKLOADS / "keras_unknown_shape.py"), "--static", "--late-determinism"],
        None,
        "keras-fit",
    ),
    "torch seeded": (
        [PY, str(WORKLOADS / "torch_seeded.py"), "--workers", "2"],
        None,
        "torch-dataloader",
    ),
    "torch worker raises": (
        [PY, str(WORKLOADS / "bad_loops.py"), "--case", "worker-raises"],
        Outcome(1, "ValueError", None),
        "torch-dataloader",
    ),
    "import fails": (
        [PY, "-c", "import numpy\nimport no_such_module_sofa_top"],
        Outcome(1, "ModuleNotFoundError", None),
        None,
    ),
    "killed by a signal": (
        [PY, "-c", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)"],
        Outcome(143, None, None),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_workload_ends_the_same_with_and_without_sofa_top(tmp_path: Path, case: str) -> None:
    cmd, expected, clock = CASES[case]
    env = clean_env()
    plain = run_plain(cmd, env)
    recorded = run_recorded(cmd, env, tmp_path / "s.sofa")
    assert recorded.workload == plain, (plain, recorded)
    # and sofa-top record exits as the workload did: 0, its own code, 128 + N for a signal
    assert recorded.record_status == plain.status, recorded
    if expected is not None:  # the failing ones fail as they should, with or without
        assert plain == expected
    else:  # and the ones that train, train to the same loss
        assert plain.status == 0 and plain.loss is not None, plain
    # with the agent at work all along: a hook that failed would switch it off and prove nothing
    assert recorded.agent_errors == (), recorded
    if clock is not None:
        assert clock in recorded.step_sources, recorded
