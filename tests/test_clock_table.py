"""The step clocks' table (``agent.clocks.TABLE``) is the one place a clock is defined: what
its wait means, its framework, its phase rule, how people read it. ``StepSample.source`` is
its kind; a new row reaches the verdicts, the phases, the framework and the reasons with no
other edit."""

from __future__ import annotations

import inspect
import sqlite3
import typing
from pathlib import Path
from typing import cast

import pytest
from test_toggle_table import _constants  # one reader of a module's string constants

from sofa_top.agent import api, clocks, settings
from sofa_top.agent.clocks import Clock, ClockRow
from sofa_top.analysis import steps as step_facts
from sofa_top.analysis.evidence import Evidence
from sofa_top.analysis.framework import model_framework
from sofa_top.analysis.verdicts import judge
from sofa_top.datamodel.samples import AgentInfo, StepSample
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("sofa_top", "collectors", "optimizers", "tui")
TOY_CALL = cast(Clock, "toy-call")
TOY_TICK = cast(Clock, "toy-tick")
TOY_ROWS = (
    ClockRow(TOY_CALL, "the toy model's calls", "torch", "host"),
    ClockRow(TOY_TICK, "toy ticks", "tensorflow", "none", trains=True, keras=True),
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clocks, "TABLE", (*clocks.TABLE, *TOY_ROWS))


def _steps(source: Clock, n: int = 20, wait: float = 0.5, name: str = "") -> list[StepSample]:
    return [
        StepSample(100.0 + i, i, 99.0 + i, 1.0, wait, source, pid=1, name=name) for i in range(n)
    ]


def test_the_step_source_is_the_tables_kind() -> None:
    hint = typing.get_type_hints(StepSample)["source"]
    assert typing.get_origin(hint) is typing.Literal
    assert set(typing.get_args(hint)) == {r.name for r in clocks.rows()}
    assert typing.get_args(hint) == clocks.CLOCKS
    # the api's clock is a row: api.iterate and mark_step default to it
    for fn in (api.iterate, api.mark_step):
        assert clocks.row_of(inspect.signature(fn).parameters["source"].default) is not None
    # every hook that marks steps can be disabled by its name
    assert {r.name for r in clocks.rows() if r.hooked} <= set(settings.HOOK_NAMES)


def test_a_name_from_outside_is_validated_where_it_enters(tmp_path: Path) -> None:
    assert clocks.clock_of("torch-dataloader") == ("torch-dataloader", "")
    assert clocks.clock_of("flood") == ("python", "flood")  # an api loop named by its user
    assert clocks.clock_of(3) == ("python", "")
    # a session file keeps the name as it came; a file of any version reads it back as a kind
    path = tmp_path / "s.sofa"
    store = SessionStore(path)
    store.write([*_steps("python", 2, name="flood"), *_steps("tf-eager", 1)])
    store.close(ended=200.0)
    db = sqlite3.connect(path)
    stored = sorted(r[0] for r in db.execute("SELECT source FROM steps"))
    assert stored == ["flood", "flood", "tf-eager"]
    db.close()
    r = SessionReader(path)
    read = r.steps()
    r.close()
    kinds = sorted((s.source, s.name) for s in read)
    assert kinds == [("python", "flood"), ("python", "flood"), ("tf-eager", "")]
    assert step_facts.step_sources(read) == {"flood": 2, "tf-eager": 1}
    assert step_facts.main_source(read) == "python" and step_facts.main_label(read) == "flood"


@pytest.mark.usefixtures("toy")
def test_a_new_row_reaches_the_verdict_the_phases_and_the_reasons() -> None:
    assert clocks.clock_of("toy-call") == (TOY_CALL, "")
    call = _steps(TOY_CALL)
    # its wait is host time, which the stacks split: a third of it input
    split = {"input": 0.2, "python": 0.4, "sync": 0.0, "output": 0.0, "compute": 0.4}
    assert step_facts.input_fraction(call, split, 50) == pytest.approx(0.5 / 3)
    assert step_facts.input_fraction(_steps("torch-dataloader"), split, 50) == 0.5
    # a model-call clock's steps without any training are inference; its framework is the model's
    assert set(step_facts.by_phase(call)) == {"inference"}
    assert model_framework(call, None, None, ("tensorflow",), None) == "torch"
    # a clock that cannot see input: the verdict says it could not measure it, and names it
    tick = _steps(TOY_TICK)
    assert set(step_facts.by_phase(tick)) == {"train"}
    assert step_facts.input_fraction(tick) is None
    v = judge(Evidence(steps=tick, tree_cpu=50.0))
    assert v.as_json()["evidence"]["input_wait_measured"] is False
    assert v.kind == "unknown" and v.headline.startswith("unknown: steps from toy ticks; ")
    assert step_facts.keras_clock(TOY_TICK) and not step_facts.keras_clock(TOY_CALL)
    # its hook's reason explains a session without steps
    agent = AgentInfo(0.0, 1, "3.11", (("torch", "2"),), (), (("toy-call", "the toy broke"),))
    facts = step_facts.RunFacts(mode="launch", launched=True, agent=agent)
    assert step_facts.no_steps_reason(facts) == "no step measured: toy-call: the toy broke"


def test_clocks_are_spelled_in_the_table_only() -> None:
    # "python" is also a stack class and a version key: its row's constant is PYTHON
    names = {r.name for r in clocks.rows()} - {"python"}
    found: set[tuple[str, str]] = set()
    paths = [p for d in SOURCES for p in (ROOT / d).rglob("*.py") if not p.is_symlink()]
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "sofa_top/agent/clocks.py":
            continue
        found |= {(rel, s) for s in _constants(path) if s in names}
    assert found == set()
