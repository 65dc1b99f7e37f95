"""Pilot tests of the launch-mode dashboard: verdict panel, steps view, input-pipeline table,
workload log, and the confirmation before quitting stops a launched workload."""

from __future__ import annotations

import signal
import threading
from dataclasses import replace

from rich.style import Style
from rich.text import Text
from test_tui_pilot import SIZE, deliver, make_app, plain, run_async, wait_for
from textual.widgets import Button
from tui_fakes import (
    BATCH,
    BOTTLENECK_STAGE,
    FIRST_REC,
    SESSION_PATH,
    T0,
    TARGET_PID,
    FakeSource,
    LaunchSource,
    compute_bound_verdict,
    input_bound_verdict,
    launch_snapshot,
    make_logs,
    make_snapshot,
)

from sofa_top.datamodel.evidence_json import evidence_json, parse_evidence
from sofa_top.datamodel.samples import Event, StepSample
from sofa_top.datamodel.snapshot import LOG_LINES
from sofa_top.datamodel.verdict import Verdict
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.confirm_quit import QUESTION, ConfirmQuitScreen
from sofa_top.tui.help_screen import HelpScreen
from sofa_top.tui.log_pane import STDERR_STYLE, log_line
from sofa_top.tui.pipeline_panel import agent_text
from sofa_top.tui.steps_panel import (
    AXIS_W,
    COMPUTE_STYLE,
    INPUT_STYLE,
    NO_STEPS_ATTACH,
    step_chart,
    step_stats,
)
from sofa_top.tui.verdict_panel import AMBER, GREEN, GREY, RED, kind_color, verdict_lines


def verdict_text(app: DashboardApp) -> str:
    return app.verdict.render().plain


def steps_of(
    durations: list[tuple[float, float]], *, batch: int | None = 64
) -> tuple[StepSample, ...]:
    """Steps with the given (duration, input wait), back to back, ending at T0 + 100."""
    out: list[StepSample] = []
    end = T0 + 100 - sum(d for d, _ in durations)
    for i, (duration, wait) in enumerate(durations):
        end += duration
        out.append(StepSample(end, i, end - duration, duration, wait, "torch-dataloader", batch))
    return tuple(out)


# -- verdict panel ------------------------------------------------------------------------------


@run_async
async def test_verdict_panel_is_compact_at_80x24() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "waiting for the first snapshot" in verdict_text(app)
        await deliver(pilot, source, launch_snapshot())
        lines = verdict_text(app).split("\n")
        # the first recommendation wraps onto a fourth line at 80 columns, never cut
        assert len(lines) == 4 and app.verdict.region.height == 4
        assert app.verdict.region.y == 2  # right under the two header lines
        assert lines[0].startswith(" INPUT-BOUND · high  60% of each step waits for input")
        assert "input-bound:" not in lines[0]  # the badge already says the kind
        # Evidence: the input share, the bottleneck stage, CPU saturation.
        assert "input wait 60% of step" in lines[1]
        assert f"bottleneck {BOTTLENECK_STAGE}" in lines[1]
        assert "CPU saturation 39%" in lines[1]
        # The first concrete code change, whole, wrapped to the width.
        assert lines[2].startswith("fix: " + FIRST_REC[:40])
        assert lines[3].startswith("     ")  # its continuation, indented under the text
        rec = " ".join(line.strip() for line in lines[2:])
        assert FIRST_REC in rec.removeprefix("fix: ") and "…" not in rec
        assert all(len(line) <= 78 for line in lines)


@run_async
async def test_verdict_panel_is_fuller_at_160x48() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await deliver(pilot, source, launch_snapshot(gpus=1))
        lines = verdict_text(app).split("\n")
        assert "confidence 95%" in lines[0]
        # GPU utilisation from the evidence: judged from this snapshot's reading (87%)
        assert "GPU 87%" in lines[1]
        verdict = input_bound_verdict()
        gpu = {**evidence_json(verdict.evidence), "gpu_util_percent": 35.0}
        with_gpu = replace(verdict, evidence=parse_evidence(verdict.kind, gpu))
        await deliver(pilot, source, launch_snapshot(gpus=1, verdict=with_gpu))
        lines = verdict_text(app).split("\n")
        assert "GPU 35%" in lines[1]
        stats = step_stats(launch_snapshot().steps)
        assert stats is not None and stats.steps_per_s is not None
        assert f"{stats.steps_per_s:.2f} steps/s median 250 ms" in lines[1]
        assert lines[2].startswith("1. " + FIRST_REC)
        assert "[prefetch]" in lines[2]
        assert lines[3].startswith("2. add .prefetch(tf.data.AUTOTUNE) after batch()")
        assert app.verdict.has_class("-alarm")  # red border for a high input-bound verdict
        await deliver(pilot, source, launch_snapshot(verdict=compute_bound_verdict()))
        assert not app.verdict.has_class("-alarm")
        assert "COMPUTE-BOUND" in verdict_text(app)


def test_verdict_colours_by_kind_and_severity() -> None:
    assert kind_color(input_bound_verdict("high")) == RED
    assert kind_color(input_bound_verdict("moderate")) == AMBER
    assert kind_color(compute_bound_verdict()) == GREEN
    assert kind_color(Verdict("unknown", 0.0, "unknown: no step telemetry")) == GREY
    assert kind_color(Verdict("idle", 0.7, "idle: 1% CPU")) == GREY
    # The badge carries the colour as a span: the headline after it keeps no background.
    first = verdict_lines(input_bound_verdict(), launch_snapshot(), 100, roomy=False)[0]
    backgrounds = [
        (span.start, span.end, span.style.bgcolor)
        for span in first.spans
        if isinstance(span.style, Style) and span.style.bgcolor is not None
    ]
    assert len(backgrounds) == 1
    start, end, bgcolor = backgrounds[0]
    assert first.plain[start:end] == " INPUT-BOUND · high "
    assert bgcolor is not None and bgcolor.triplet is not None
    assert bgcolor.triplet.hex == RED


@run_async
async def test_verdict_panel_without_verdict_says_so_and_shows_numbers() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await deliver(pilot, source, make_snapshot(cpu=312.0))
        text = verdict_text(app)
        assert "judging" in text
        assert "CPU saturation 39%" in text  # 312% of one core on 8 cores
        assert "no GPU" in text


# -- steps view ---------------------------------------------------------------------------------


def test_step_stats_numbers() -> None:
    steps = steps_of([(0.5, 0.2)] * 20, batch=64)
    stats = step_stats(steps)
    assert stats is not None
    assert stats.steps_per_s == 2.0
    assert stats.samples_per_s == 128.0
    assert stats.median_s == 0.5
    assert stats.input_fraction is not None and abs(stats.input_fraction - 0.4) < 1e-9
    assert stats.count == 20 and stats.last_step == 19
    # Only the last 10 s count: old slow steps do not drag the rate down.
    slow_then_fast = steps_of([(5.0, 4.0)] * 10 + [(0.25, 0.0)] * 40, batch=None)
    recent = step_stats(slow_then_fast)
    assert recent is not None
    assert recent.steps_per_s == 4.0 and recent.samples_per_s is None
    assert recent.input_fraction == 0.0
    assert step_stats(()) is None


def test_step_chart_stacks_input_under_compute_newest_right() -> None:
    # Step 0: all compute; step 1: all input wait; step 2: half and half.
    steps = steps_of([(1.0, 0.0), (1.0, 1.0), (1.0, 0.5)])
    lines = step_chart(steps, width=20, height=4)
    assert len(lines) == 4
    # Few steps: one bar and one gap each, flush right (columns 14, 16, 18 of 20).
    bottom = lines[-1]
    columns = [i for i, ch in enumerate(bottom.plain) if i >= AXIS_W and ch != " "]
    assert columns == [14, 16, 18]

    def style_at(line: Text, index: int) -> Style:
        styles = [span.style for span in line.spans if span.start <= index < span.end]
        return Style.parse(str(styles[-1])) if styles else Style()

    top = lines[0]
    assert style_at(top, 14).color == COMPUTE_STYLE.color  # compute all the way up
    assert style_at(bottom, 14).color == COMPUTE_STYLE.color
    assert style_at(top, 16).color == INPUT_STYLE.color  # input all the way up
    assert style_at(bottom, 18).color == INPUT_STYLE.color  # input at the bottom ...
    assert style_at(top, 18).color == COMPUTE_STYLE.color  # ... compute on top
    assert lines[0].plain.strip().startswith("1.10 s")  # axis: the scale at the top
    # the widest label keeps its unit whole ("51.6 m" was "51.6 ms" cut to the axis)
    ms = step_chart(steps_of([(0.047, 0.0)] * 3), width=20, height=4)
    assert ms[0].plain.startswith("51.7 ms ┤")


@run_async
async def test_steps_view_shows_throughput_and_chart() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        steps = steps_of([(0.5, 0.2)] * 30, batch=BATCH)
        # no verdict yet: the pane's own figures
        await deliver(pilot, source, launch_snapshot(steps=steps, verdict=None))
        await pilot.press("2")
        await pilot.pause()
        assert app.views.active == "tab-steps"
        summary = app.steps.summary.render().plain
        assert "2.00 steps/s" in summary
        assert f"{2 * BATCH} samples/s" in summary
        assert "median 500 ms" in summary and "input wait 40%" in summary
        # judged from steps (its own window): the screen gives that share as the verdict does
        await deliver(pilot, source, launch_snapshot(steps=steps))
        await pilot.pause()
        summary = app.steps.summary.render().plain
        assert "input wait 60%" in summary and "60% of each step" in app.verdict.render().plain
        assert "step 29" in summary
        chart = app.steps.chart.render().plain
        assert "last 30 steps" in chart
        assert "torch-dataloader · batch 256" in str(app.steps.border_title)
        # 1 goes back to the overview.
        await pilot.press("1")
        await pilot.pause()
        assert app.views.active == "tab-overview"


@run_async
async def test_steps_view_in_attach_mode_says_to_launch() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, make_snapshot())
        await pilot.press("2")
        await pilot.pause()
        assert app.steps.chart.render().plain == NO_STEPS_ATTACH
        assert not app.steps.summary.display
        assert "launch mode" in plain(app.pipeline.body.render())
        assert "not loaded (attach mode)" in plain(app.pipeline.body.render())


@run_async
async def test_pipeline_table_marks_the_bottleneck_and_lists_hooks() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot())
        await pilot.press("2")
        await pilot.pause()
        text = plain(app.pipeline.body.render(), width=96)
        rows = {line.split()[0]: line for line in text.splitlines() if line.strip()}
        assert rows["stage"].split() == ["stage", "kind", "parallel", "buffer", "per", "element"]
        assert rows[BOTTLENECK_STAGE].split() == [
            BOTTLENECK_STAGE,
            "map",
            "1",
            "-",
            "580",
            "µs",
            "◀",
            "bottleneck",
        ]
        assert rows["ShuffleDataset"].split() == [
            "ShuffleDataset",
            "other",
            "-",
            "10000",
            "4",
            "µs",
        ]
        assert "bottleneck" not in rows["BatchDatasetV2"]
        assert "✓tf-eager ✓tf-data-pipeline" in text
        assert "✗keras-fit (keras not imported)" in text
        assert f"bottleneck {BOTTLENECK_STAGE}" in str(app.pipeline.border_title)


def test_agent_line_says_what_is_missing() -> None:
    assert "no report yet" in agent_text(None, launched=True).plain
    assert "attach mode" in agent_text(None, launched=False).plain


# -- log view -----------------------------------------------------------------------------------


def test_stderr_lines_are_coloured_and_never_markup() -> None:
    err = log_line(Event(T0, "log", "[red]Traceback", {"stream": "stderr"}))
    out = log_line(Event(T0, "log", "step 1", {"stream": "stdout"}))
    assert err.plain == "[red]Traceback"
    assert err.style == STDERR_STYLE
    assert out.style != STDERR_STYLE


@run_async
async def test_log_view_appends_only_new_lines_and_colours_stderr() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        first = make_logs(30)
        await deliver(pilot, source, launch_snapshot(logs=first))
        await pilot.press("3")
        await pilot.pause()
        view = app.log_pane.log_view
        assert len(view.lines) == 30
        # The next snapshot carries the same objects plus 10 new lines (the hub's deque).
        newer = tuple(
            Event(T0 + 80 + i, "log", f"late {i}", {"stream": "stdout"}) for i in range(10)
        )
        await deliver(pilot, source, launch_snapshot(logs=first[5:] + newer))
        await pilot.pause()
        assert len(view.lines) == 40
        texts = [strip.text.rstrip() for strip in view.lines]
        assert texts[:2] == ["step 0: loss=0.000", "step 1: loss=0.001"]
        assert texts[-1] == "late 9"

        # stderr lines (every 5th) carry the stderr colour; stdout ones do not.
        def colours(index: int) -> set[object]:
            return {
                seg.style.color
                for seg in view.lines[index]
                if seg.style is not None and seg.text.strip()
            }

        assert texts[4].startswith("W0000 warning 4")
        assert colours(4) == {STDERR_STYLE.color}
        assert STDERR_STYLE.color not in colours(3)
        status = str(app.log_pane.status.render())
        assert "40 lines" in status and "6 on stderr" in status
        assert "dropped" not in status


@run_async
async def test_log_view_is_bounded_and_reports_dropped_lines() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        flood = tuple(
            Event(T0 + i * 0.001, "log", f"line {i}", {"stream": "stdout"})
            for i in range(LOG_LINES)
        )
        await deliver(pilot, source, launch_snapshot(logs=flood))
        more = tuple(
            Event(T0 + 10 + i * 0.001, "log", f"more {i}", {"stream": "stderr"}) for i in range(500)
        )
        await deliver(pilot, source, launch_snapshot(logs=flood[500:] + more, logs_dropped=1234))
        await pilot.pause()
        view = app.log_pane.log_view
        assert len(view.lines) == LOG_LINES  # bounded: the oldest 500 went
        assert view.lines[0].text.rstrip() == "line 500"
        assert view.lines[-1].text.rstrip() == "more 499"
        status = str(app.log_pane.status.render())
        assert "1234 lines dropped" in status
        assert f"{LOG_LINES} lines" in status
        assert "1234 dropped" in str(app.log_pane.border_title)
        assert view.is_vertical_scroll_end  # following the end while nobody scrolled up


@run_async
async def test_log_view_in_attach_mode_explains() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, make_snapshot())
        await pilot.press("3")
        await pilot.pause()
        assert "launch mode only" in str(app.log_pane.status.render())


@run_async
async def test_exit_banner_shows_the_workload_exit_code() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot(target_exited=True, exit_code=137))
        assert "target exited (code 137)" in str(app.banner.render())
        assert app.banner.has_class("-failed")


# -- quitting launch mode -----------------------------------------------------------------------


@run_async
async def test_quit_asks_before_stopping_a_running_workload() -> None:
    source = FakeSource([], session_path="/tmp/sessions/launch-1.sofa")
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot())
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmQuitScreen)
        text = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert QUESTION in text and f"pid {TARGET_PID}" in text
        labels = [str(b.label) for b in app.screen.query(Button)]
        assert labels == ["[y] stop & quit", "[n] cancel"]
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmQuitScreen)
        assert app.is_running and source.stop_calls == 0
        # Ctrl-C asks the same question; pressing it again does not answer it.
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmQuitScreen)
        await pilot.press("ctrl+c", "q", "enter")  # enter: the focused default is "cancel"
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmQuitScreen)
        assert source.stop_calls == 0 and app.return_value is None
        await pilot.press("ctrl+c")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == "/tmp/sessions/launch-1.sofa"
    assert app.stopped_workload
    assert source.stop_calls == 1
    assert source.stop_threads[0] != threading.main_thread().ident


@run_async
async def test_quit_can_detach_and_leave_the_workload_running() -> None:
    source = LaunchSource(session_path="/tmp/sessions/launch-2.sofa")
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot())
        await pilot.press("q")
        await pilot.pause()
        labels = [str(b.label) for b in app.screen.query(Button)]
        assert labels == ["[y] stop & quit", "[d] detach: leave it running", "[n] cancel"]
        await pilot.press("d")
        await wait_for(lambda: app.return_value is not None)
    assert app.detached_workload and not app.stopped_workload
    assert (source.detach_calls, source.stop_calls) == (1, 0)


@run_async
async def test_a_closed_terminal_ends_the_dashboard_as_stop_does() -> None:
    """SIGHUP (the signal handler's path, through the event loop): no question asked."""
    source = LaunchSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot())
        app.on_os_signal(signal.SIGHUP, None)
        await wait_for(lambda: app.return_value is not None)
    assert app.signalled == "SIGHUP" and source.signals == ["SIGHUP"]
    assert source.stop_calls == 0 and source.detach_calls == 0


@run_async
async def test_quit_does_not_ask_once_the_workload_exited() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot(target_exited=True, exit_code=0))
        await pilot.press("q")
        await wait_for(lambda: app.return_value is not None)
    assert app.return_value == SESSION_PATH
    assert not app.stopped_workload


@run_async
async def test_ctrl_c_in_attach_mode_quits_without_asking() -> None:
    # Nothing of the user's is stopped in attach mode: detaching needs no confirmation.
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, make_snapshot())
        await pilot.press("ctrl+c")
        await wait_for(lambda: app.return_value is not None)
    assert source.stop_calls == 1


class LaunchedSource(FakeSource):
    """A launch-mode source before its first snapshot: the session knows what it started."""

    def __init__(self) -> None:
        super().__init__()
        self.target = launch_snapshot().target


@run_async
async def test_quit_before_the_first_snapshot_still_asks_in_launch_mode() -> None:
    source = LaunchedSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("ctrl+c")  # from the help screen too
        await pilot.pause()
        assert isinstance(app.screen, ConfirmQuitScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert source.stop_calls == 0


@run_async
async def test_views_keep_updating_while_hidden() -> None:
    source = FakeSource()
    app = make_app(source)
    async with app.run_test(size=SIZE) as pilot:
        await deliver(pilot, source, launch_snapshot(verdict=input_bound_verdict("moderate")))
        assert "INPUT-BOUND · moderate" in verdict_text(app)
        await deliver(
            pilot,
            source,
            launch_snapshot(
                T0 + 80, steps=steps_of([(0.25, 0.0)] * 12), verdict=compute_bound_verdict()
            ),
        )
        await pilot.press("2")
        await pilot.pause()
        assert "4.00 steps/s" in app.steps.summary.render().plain
        assert "COMPUTE-BOUND" in verdict_text(app)


def test_a_number_the_verdict_lacks_is_not_shown() -> None:
    """The panel shows the verdict's numbers only: one its evidence lacks (a verdict read back
    from an older file) is missing, never re-derived from the live snapshot."""
    snapshot = launch_snapshot(gpus=1)
    judged = snapshot.verdict
    assert judged is not None
    shown = verdict_lines(judged, snapshot, 160, roomy=True)[1].plain
    assert "CPU saturation 39%" in shown and "GPU 87%" in shown
    bare = parse_evidence("input-bound", {"input_fraction": 0.6})
    lacking = verdict_lines(replace(judged, evidence=bare), snapshot, 160, roomy=True)[1].plain
    assert "input wait 60% of step" in lacking
    assert "CPU saturation" not in lacking and "GPU 87%" not in lacking


def test_verdict_evidence_names_the_input_cause() -> None:
    verdict = input_bound_verdict()
    cause = {"input_cause": "latency", "input_cpu_cores": 0.14}
    evidence = parse_evidence(verdict.kind, {**evidence_json(verdict.evidence), **cause})
    caused = replace(verdict, evidence=evidence)
    lines = verdict_lines(caused, launch_snapshot(), 160, roomy=True)
    assert "input latency (0.1 cores busy)" in lines[1].plain
    # no cause measured: nothing said about it
    plain = verdict_lines(verdict, launch_snapshot(), 160, roomy=True)[1].plain
    assert "cores busy" not in plain


def test_agent_pane_shows_keras_only_for_a_workload_that_uses_it() -> None:
    from sofa_top.datamodel.samples import AgentInfo
    from sofa_top.tui.pipeline_panel import keras_used

    # what the agent reports for a plain tf.data script: TensorFlow imported Keras itself,
    # so the Keras hook installed, yet the script never calls fit
    tf_script = AgentInfo(
        T0, 4242, "3.11.7", (("tensorflow", "2.21.0"), ("keras", "3.15.1")),
        ("tf-eager", "tf-data-pipeline", "keras-fit"),
        (("torch-dataloader", "not imported by the workload"),),
    )  # fmt: skip
    eager = steps_of([(0.25, 0.05)] * 5)  # tf-eager steps
    assert not keras_used(tf_script, eager)
    text = agent_text(tf_script, launched=True, keras=False).plain
    assert "keras" not in text and "✓tf-eager" in text and "tensorflow 2.21.0" in text
    # a Keras fit shows both
    fit = tuple(replace(s, source="keras-fit") for s in eager)
    assert keras_used(tf_script, fit)
    assert "✓keras-fit" in agent_text(tf_script, launched=True, keras=True).plain
    # a fit the hook saw but could not measure says why
    spe = replace(
        tf_script,
        hooks_applied=("tf-eager",),
        hooks_skipped=(("keras-fit", "steps_per_execution=32: batches are fetched in-graph"),),
    )
    assert keras_used(spe, eager)
