"""One number per fact per screen: a real recording (an attach that injected the agent into a
tuned tf.data loop) is read through every widget that shows each fact, and each fact reads the
same everywhere: the share of a step spent waiting for input, whether the workload has the
agent, a stage's time per element. And compare's diagnosis gives the input wait per step as a
part of the step, not a per-item latency under that name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WORKLOADS, run_cli
from procs import spawned
from rich.console import Console
from test_tui_pilot import run_async, wait_for

from sofa_top.optimizers.compare.results import CompareResult
from sofa_top.optimizers.compare.text import diagnosis_lines
from sofa_top.optimizers.headroom import Diagnosis
from sofa_top.recording.replay import ReplaySource
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.steps_panel import stats_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PERCENT_OF_STEP = re.compile(r"(\d+)% of (?:each )?step")
INPUT_WAIT = re.compile(r"input wait (\d+)%")


@pytest.fixture(scope="module")
def attached(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``record --pid`` (the agent injected) of a tuned, input-bound tf.data loop."""
    out = tmp_path_factory.mktemp("facts") / "a.sofa"
    loop = [sys.executable, str(WORKLOADS / "input_shapes_tf.py"), "--shape", "cpu"]
    argv = [*loop, "--autotune", "--seconds", "600"]
    # injected once it is in its loop (an injection waits for Python code to run)
    with spawned(argv, ready=b"step ", stderr=subprocess.DEVNULL) as work:
        r = run_cli(
            "record", "--pid", str(work.pid), "--duration", "20", "--json", "-o", str(out),
            "--inject-timeout", "60", timeout=240,
        )  # fmt: skip
        assert work.poll() is None
    assert r.returncode == 0, r.stderr
    assert f"agent injected into PID {work.pid}" in r.stderr, r.stderr
    return out


def plain(renderable: object, width: int) -> str:
    console = Console(width=width, color_system=None)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


def texts(app: DashboardApp) -> dict[str, str]:
    """What each widget that tells these facts says, as plain text."""
    return {
        "header": "\n".join(t.plain for t in app.header.text_lines()),
        "verdict": "\n".join(t.plain for t in app.verdict.text_lines()),
        "steps": stats_text(stats).plain if (stats := app.steps.summary.stats) else "",
        "pipeline": plain(app.pipeline.body.render(), 150),
    }


@run_async
async def test_each_fact_reads_the_same_in_every_widget(attached: Path) -> None:
    source = ReplaySource(attached)
    app = DashboardApp(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(lambda: app.shown is not None)
        # the steps view: the steps pane and the pipeline (the startup's own focus events
        # may still switch the view back to the overview for a moment)
        for _ in range(100):
            app.action_show_view("steps")
            await pilot.pause(0.2)
            if app.views.active == "tab-steps" and app.steps.summary.stats is not None:
                break
        assert app.views.active == "tab-steps" and app.steps.summary.display
        await pilot.pause()
        seen = texts(app)
        snap = app.shown
        assert snap is not None and snap.verdict is not None and snap.agent is not None
        everything = "\n".join(seen.values())

        # the share of a step spent waiting for input: one number
        shares = {int(x) for x in PERCENT_OF_STEP.findall(everything)}
        shares |= {int(x) for x in INPUT_WAIT.findall(everything)}
        assert len(shares) == 1, (shares, seen)
        assert INPUT_WAIT.search(seen["steps"]), seen["steps"]

        # the agent: injected, said so by the header, and nowhere said to be missing
        assert "agent injected" in seen["header"]
        for missing in ("(no agent)", "not loaded", "never connected", "no step telemetry"):
            assert missing not in everything, (missing, seen)
        assert f"pid {snap.agent.pid}" in seen["pipeline"]  # the agent line: its own report

        # a stage's time per element: the table's row, and no second figure in the note
        assert snap.pipeline is not None and snap.pipeline.note.startswith("runtime")
        note = snap.pipeline.note
        assert not re.search(r"\d\s*(?:ms|µs|s) per element", note), note
        await pilot.press("q")
    source.stop()


def test_compares_input_per_step_is_a_part_of_the_step() -> None:
    """Four producers that each take 200 ms per item fill a 100 ms step's 50 ms wait: the
    diagnosis says 50 ms of input wait per step, and the 200 ms as what one item takes."""
    d = Diagnosis(
        cause="latency", input_fraction=0.5, input_cpu_cores=0.1, input_parallelism=4,
        cores=2, compute_s=0.05, input_s=0.2, cpu_per_step_s=0.01, batch_size=8.0,
        memory=None, rss=None, step_s=0.1, wait_s=0.05,
    )  # fmt: skip
    result = CompareResult(["python", "t.py"], 1, 10, None, 2, [], None, [], diagnosis=d)
    (line,) = diagnosis_lines(result)
    assert "50.0 ms input wait / step" in line and "50.0 ms compute / step" in line
    assert "200.0 ms per input item (4 producers)" in line
    assert "ms input / step" not in line
