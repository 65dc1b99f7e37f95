"""What a comparison measured is carried into the live verdict and the session: from the
optimizer panel over a real launched workload (its comparison stands in: the comparison itself
is tested on real runs in test_compare*.py and test_cause_truth.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import WORKLOADS
from test_tui_optimizer import FakeRunner, fake_result, run_async, settle
from textual.widgets import Button

from sofa_top.launch import LaunchRequest, Sampling, open_launch
from sofa_top.optimizers.compare import CompareResult
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import session_summary
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.optimizer_screen import OptimizerScreen


class MeasuringRunner(FakeRunner):
    """A comparison in which prefetch was clearly faster (3 runs a side, apart)."""

    def __call__(self, cmd: Sequence[str], configs: Sequence[str] = (), *a: Any, **k: Any) -> Any:
        result: CompareResult = super().__call__(cmd, configs, *a, **k)
        for r in result.runs:
            rates = [o.rate for o in r.outcomes if o.rate is not None]
            r.interval = (min(rates), max(rates))
            r.effect = None if r.config == "baseline" else "faster"
        return result


async def _until(pilot: Any, check: Any, what: str, seconds: float = 120.0) -> None:
    for _ in range(int(seconds * 10)):
        if check():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@run_async
async def test_a_panel_comparison_is_carried_into_the_live_verdict(tmp_path: Path) -> None:
    cmd = (sys.executable, str(WORKLOADS / "agent_plain.py"), "--steps", "100000",
           "--input-ms", "8", "--compute-ms", "2")  # fmt: skip
    run = open_launch(
        LaunchRequest(cmd=cmd, output=str(tmp_path / "live.sofa"), sampling=Sampling(stacks=False))
    )
    app = DashboardApp(run)
    app.optimizer_runner = MeasuringRunner()  # type: ignore[attr-defined]
    try:
        async with app.run_test(size=(160, 48)) as pilot:

            def judged() -> bool:
                v = app.latest.verdict if app.latest is not None else None
                return v is not None and v.kind == "input-bound"

            await _until(pilot, judged, "an input-bound verdict")
            await pilot.press("o")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, OptimizerScreen)
            await pilot.click("#opt-run")
            await screen.workers.wait_for_complete()
            await settle(pilot, 5)
            assert screen.result is not None and screen.result.best == "prefetch"
            assert screen.query_one("#opt-run", Button).disabled is False

            def carried() -> bool:
                v = app.latest.verdict if app.latest is not None else None
                return v is not None and "measured: prefetch x1.64" in v.headline

            await _until(pilot, carried, "the measured result in the live verdict")
            v = app.latest.verdict if app.latest is not None else None
            assert v is not None
            first = v.recommendations[0]
            assert first.toggle == "prefetch" and first.text.endswith(
                "(measured: prefetch x1.64 (1.60-1.66))"
            )
            ev = v.as_json()["evidence"]
            assert [m["toggle"] for m in ev["measured"]] == ["prefetch"]  # type: ignore[index]
    finally:
        run.finish("user quit")
    # ... and the session keeps it: its summary's verdict quotes it too
    reader = SessionReader(Path(run.session_path))
    try:
        assert [e.data["toggle"] for e in reader.events("measured")] == ["prefetch"]
        # a replay's verdict marker carries it too (a new measurement is a verdict change)
        marker = reader.events("verdict")[-1]
        assert "measured: prefetch x1.64" in marker.message
    finally:
        reader.close()
    summary = session_summary(run.session_path)
    assert "measured: prefetch x1.64" in summary["verdict"]["headline"]
    assert fake_result  # the shape the runner returns (test_tui_optimizer's)
