"""The live verdict's steps: steps longer than its window still count (an LBFGS step, say)."""

from __future__ import annotations

import time
from pathlib import Path

from sofa_top.analysis.verdicts import WINDOW_S
from sofa_top.datamodel.samples import StepSample
from sofa_top.datamodel.snapshot import TargetInfo
from sofa_top.recording.hub import Session
from sofa_top.recording.store import SessionStore


def _session(tmp_path: Path) -> Session:
    target = TargetInfo(pid=1, name="train", cmdline=("python", "train.py"), launched=True)
    return Session(target, [], SessionStore(tmp_path / "s.sofa"), mode="launch")


def _steps(end: float, n: int, each_s: float) -> list[StepSample]:
    return [
        StepSample(
            end - (n - 1 - i) * each_s, i, end - (n - i) * each_s, each_s, 0.0, "torch-dataloader"
        )
        for i in range(n)
    ]


def test_steps_longer_than_the_window_still_judge_the_live_verdict(tmp_path: Path) -> None:
    s = _session(tmp_path)
    now = time.time()
    # three 15 s steps; only the last ended inside the 10 s window, and the next one is running
    s._record(list(_steps(now - 5.0, 3, 1.5 * WINDOW_S)))
    v = s.snapshot().verdict
    assert v is not None and v.kind == "compute-bound", v
    assert (
        v.as_json()["evidence"]["step_source"] == "torch-dataloader"
        and v.as_json()["evidence"]["steps"] == 3
    )
    s.stop()


def test_steps_of_a_loop_that_ended_long_ago_do_not(tmp_path: Path) -> None:
    s = _session(tmp_path)
    s._record(list(_steps(time.time() - 120.0, 3, 0.1)))  # short steps, two minutes ago
    v = s.snapshot().verdict
    assert (
        v is not None
        and "steps_reason" in v.as_json()["evidence"]
        and "step_source" not in v.as_json()["evidence"]
    )
    s.stop()
