"""What a snapshot source can do besides snapshots is a Protocol the UI checks by type
(``datamodel.source``), never a ``getattr`` by name that a typo turns into "cannot"."""

from __future__ import annotations

import ast
from pathlib import Path

from tui_fakes import FakeSource, LaunchSource, launch_snapshot

from sofa_top.datamodel.source import (
    Detachable,
    MeasuredSink,
    SignalEnded,
    measured_sink,
    target_of,
)
from sofa_top.launch import Run
from sofa_top.recording.hub import Session
from sofa_top.recording.replay import ReplaySource

ROOT = Path(__file__).resolve().parents[1]


def test_the_real_sources_have_the_capabilities_the_ui_checks() -> None:
    assert issubclass(Run, Detachable) and issubclass(Run, SignalEnded)
    assert issubclass(Session, MeasuredSink)
    # a replay can neither detach nor take measurements: the quit dialog offers no detach
    assert not issubclass(ReplaySource, Detachable | SignalEnded | MeasuredSink)
    assert isinstance(LaunchSource(), Detachable) and not isinstance(FakeSource(), Detachable)


class _Holder(FakeSource):
    """A launch's shape: the session it holds knows the target and keeps measurements."""

    def __init__(self, session: object) -> None:
        super().__init__()
        self.session = session


class _Session:
    def __init__(self) -> None:
        self.target = launch_snapshot().target
        self.noted: list[object] = []

    def note_measured(self, measured: object) -> None:
        self.noted.append(measured)


def test_target_and_measurements_are_found_on_the_source_or_its_session() -> None:
    session = _Session()
    holder = _Holder(session)
    assert target_of(holder) == session.target
    assert measured_sink(holder) is session
    assert target_of(FakeSource()) is None and measured_sink(FakeSource()) is None
    assert target_of(_Holder(object())) is None


def test_the_ui_probes_no_attribute_by_name() -> None:
    for rel in ("tui/app.py", "tui/optimizer_screen.py"):
        tree = ast.parse((ROOT / rel).read_text())
        probes = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr")
        ]
        assert probes == [], (rel, probes)
