"""Functions nothing calls are removed, not kept "in case" (issue 33 named six)."""

from __future__ import annotations

import importlib

import pytest

GONE = (
    ("sofa_top.tui.app", "run_replay"),
    ("sofa_top.tui.formatting", "short_path"),
    ("sofa_top.analysis.classify", "is_compute_frame"),
    ("sofa_top.analysis.classify", "is_idle_leaf"),
    ("sofa_top.analysis.classify", "has_model_calls"),
    ("sofa_top.agent.inject.importable", "load_by_path"),
)


@pytest.mark.parametrize(("module", "name"), GONE)
def test_the_dead_functions_are_gone(module: str, name: str) -> None:
    assert not hasattr(importlib.import_module(module), name)
