"""The toggle table (``agent.toggles.TABLE``) is the one place a toggle is defined: a new row
reaches compare's configurations, the optimizer panel, the agent's spec and the verdict's JSON
with no other edit but its installer."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, cast

import pytest
from test_tui_optimizer import SIZE, dashboard, open_panel, run_async
from textual.widgets import Checkbox
from tui_fakes import launch_snapshot

from sofa_top.agent import optimize, toggles
from sofa_top.agent.toggles import OptimizeSpec, Toggle, ToggleRow
from sofa_top.datamodel.verdict import Recommendation, Verdict
from sofa_top.optimizers.compare import CompareResult, ConfigResult, changes_for
from sofa_top.optimizers.compare.configs import configs, default_configs, plan

ROOT = Path(__file__).resolve().parents[1]
# the package and its root folders (``sofa_top/collectors`` etc. are links to them)
SOURCES = ("sofa_top", "collectors", "optimizers", "tui")
TOY = cast(Toggle, "toy_toggle")
TOY_ROW = ToggleRow(TOY, "a toy toggle", ("torch",), "toy.apply(model)")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ToggleRow:
    monkeypatch.setattr(toggles, "TABLE", (*toggles.TABLE, TOY_ROW))
    return TOY_ROW


def test_a_new_row_reaches_compare_the_agent_and_the_verdict(toy: ToggleRow) -> None:
    # compare: a configuration under the name people type, planned like the others
    assert configs()["toy-toggle"] == OptimizeSpec({TOY: True})
    assert plan(["toy-toggle"]) == (["baseline", "toy-toggle"], {})
    assert plan(["prefetch", "toy-toggle"])[0][-1] == "prefetch+toy-toggle"
    assert "toy-toggle" not in default_configs()  # not in_all: asked for by name
    # what compare tells the user to keep: the row's code change
    run = ConfigResult("toy-toggle", configs()["toy-toggle"], applied=[TOY])
    result = CompareResult(["python", "t.py"], 1, None, None, 0, [run], None, [])
    assert changes_for(result, "toy-toggle") == ["toy.apply(model)"]
    # the agent's spec: parsed from and written to the wire, its hook named and read back
    spec, problems = OptimizeSpec.from_json({"toy_toggle": True, "xla": True})
    assert problems == () and set(spec.toggles()) == {TOY, "xla"}
    assert spec.to_json() == {"xla": True, "toy_toggle": True}
    assert OptimizeSpec.from_json({"toy_toggle": 3})[1] == (
        "optimize: toy_toggle: expected true or false",
    )
    assert toggles.toggle_of_hook(toggles.hook_name(TOY)) == TOY
    # until its framework is imported, the agent says which one it waits for
    assert optimize._not_imported(TOY) == (
        "not a PyTorch job: the workload never imported torch"
    )  # fmt: skip
    # advice that names it survives the verdict's JSON (a session file, replay)
    v = Verdict("compute-bound", 0.9, "h", recommendations=(Recommendation("do it", TOY),))
    assert v.as_json()["toggles"] == ["toy-toggle"]
    assert Verdict.from_json(v.as_json()).recommendations[0].toggle == TOY


@run_async
async def test_a_new_row_is_a_checkbox_in_the_panel(toy: ToggleRow) -> None:
    app = dashboard(launch_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_panel(app, pilot)
        box = screen.query_one("#opt-toy-toggle", Checkbox)
        assert str(box.label) == "a toy toggle" and box.value is False
        box.value = True
        await pilot.pause()
        assert "toy-toggle" in screen.selected()


def test_exclusions_come_from_the_table() -> None:
    assert toggles.excluded(["depth_first", "xla"]) == ("depth_first",)
    assert toggles.excluded(["depth_first", "compile_mode"]) == ("depth_first",)
    assert toggles.excluded(["depth_first", "prefetch"]) == ()
    assert toggles.numerics_changing(["bf16", "xla"]) == ("bf16",)


# String constants equal to a toggle key that mean something else (reviewed one by one): a
# tf.data/DataLoader stage kind, the scheduler's thread group, DataLoader's keyword argument,
# the depth-first transform's module, a Measured field, doctor's GPU capability.
OTHER_MEANINGS = {
    ("sofa_top/agent/hooks_tf.py", "prefetch"),  # the tf.data stage kind
    ("sofa_top/agent/hooks_torch.py", "prefetch"),  # the DataLoader's worker-prefetch stage kind
    ("sofa_top/agent/hooks_torch.py", "pin_memory"),  # the DataLoader's pin_memory stage
    ("sofa_top/agent/optimize.py", "depth_first"),  # the transform's module and function
    ("sofa_top/agent/optimize.py", "pin_memory"),  # DataLoader(pin_memory=True)
    ("sofa_top/agent/optimize_gpu.py", "pin_memory"),  # DataLoader(pin_memory=True)
    ("sofa_top/analysis/causes.py", "threads"),  # the scheduler's thread group
    ("sofa_top/analysis/causes.py", "prefetch"),  # the stage kind
    ("sofa_top/analysis/verdicts.py", "threads"),  # the scheduler's thread group
    ("sofa_top/analysis/verdicts.py", "pin_memory"),  # the DataLoader's pin_memory stage
    ("sofa_top/cli/doctor.py", "bf16"),  # whether the GPU has bf16
    ("sofa_top/datamodel/samples.py", "threads"),  # the scheduler's thread group
    ("sofa_top/datamodel/samples.py", "prefetch"),  # the stage kind
    (
        "sofa_top/datamodel/verdict_evidence.py",
        "threads",
    ),  # Measured.threads: the thread count it ran at
    ("sofa_top/recording/series.py", "threads"),  # the scheduler's thread group's series
    ("collectors/sched.py", "threads"),  # the scheduler's thread group
    ("optimizers/__init__.py", "depth_first"),  # the transform's module
    ("optimizers/depth_first/__init__.py", "depth_first"),  # the transform's function
    ("optimizers/advice/inputs.py", "prefetch"),  # the stage kind
    ("optimizers/advice/stages.py", "prefetch"),  # the stage kind
}


def _constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_toggles_are_spelled_in_the_table_only() -> None:
    keys = {r.key for r in toggles.rows()}
    names = {r.name for r in toggles.rows()} - keys
    found: dict[tuple[str, str], Any] = {}
    paths = [p for d in SOURCES for p in (ROOT / d).rglob("*.py") if not p.is_symlink()]
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "sofa_top/agent/toggles.py":
            continue
        for s in _constants(path):
            if s in names:  # the names people read are derived, never spelled
                found[(rel, s)] = "name"
            elif s in keys and (rel, s) not in OTHER_MEANINGS:
                found[(rel, s)] = "key"
    assert not found, found
