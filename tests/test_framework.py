"""The framework of the workload's model is decided once (``analysis.framework``): the
verdict's advice and the optimizer panel's toggles read the same answer."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tui_fakes import gpu_loop_snapshot, launch_snapshot, make_snapshot

from sofa_top.analysis import verdicts
from sofa_top.analysis.evidence import Evidence
from sofa_top.analysis.framework import snapshot_framework
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.tui import optimizer_screen


def _evidence(s: Snapshot) -> Evidence:
    """What the hub judges for ``s`` (its frameworks: the agent's report's names)."""
    names = tuple(n for n, _v in s.agent.frameworks) if s.agent else ()
    return Evidence(
        steps=s.steps, stacks=s.stacks, pipeline=s.pipeline, frameworks=names, model=s.model
    )


def _torch_model_over_tf_data() -> Snapshot:
    """A torch model whose input TensorFlow's ops make: the clock is the model's calls."""
    s = launch_snapshot()
    return replace(s, steps=tuple(replace(st, source="torch-model-call") for st in s.steps))


CASES = {
    "tf.data pipeline": (launch_snapshot, "tensorflow"),
    "torch model fed by tf.data": (_torch_model_over_tf_data, "torch"),
    "a CUDA loop": (gpu_loop_snapshot, "torch"),
    "stacks only (attach): DataLoader frames": (make_snapshot, "torch"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_panel_and_the_verdict_read_one_framework(case: str) -> None:
    make, expected = CASES[case]
    snap = make()
    assert snapshot_framework(snap) == expected
    assert verdicts._framework(_evidence(snap)) == expected


def test_the_panel_decides_no_framework_of_its_own() -> None:
    assert not hasattr(optimizer_screen, "snapshot_framework") or (
        optimizer_screen.snapshot_framework is snapshot_framework
    )
