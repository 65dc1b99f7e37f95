"""Steps view: per-step input wait vs compute (and, in CUDA loops, how busy the GPU was),
throughput, each phase's steps (training, evaluation, inference) with their input wait and
step-time percentiles and the compute split (the stages and the agent: ``pipeline_panel``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size

from sofa_top.analysis import steps as step_facts
from sofa_top.datamodel.samples import StepSample, agent_state
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.datamodel.verdict_evidence import ProcessEvidence
from sofa_top.tui.line_cache import LineCachedWidget, QuietTitles
from sofa_top.tui.sparkline import append_runs
from sofa_top.tui.split_bar import CLASS_COLORS

STATS_WINDOW_S = 10.0  # as the verdicts: throughput and median over about the last 10 s
AXIS_W = 9  # "51.6 ms ┤": the longest label human_seconds writes, whole
BLOCKS = " ▁▂▃▄▅▆▇█"

INPUT_STYLE = Style(color=CLASS_COLORS["input"])
COMPUTE_STYLE = Style(color=CLASS_COLORS["compute"])
GPU_STYLE = Style(color="#af87ff")
CLIPPED_STYLE = Style(color="bright_white", bold=True)
AXIS_STYLE = Style(color="grey62")
DIM = Style(color="grey62", italic=True)
BOLD = Style(bold=True)
BOTTLENECK_STYLE = Style(color="red", bold=True)

NO_STEPS_ATTACH = (
    "no step telemetry (attach mode) — use sofa-top launch -- CMD for per-step input wait"
)
NO_STEPS_YET = (
    "waiting for the first steps… (the agent times model calls, Keras fit, tf.data and "
    "DataLoader fetches, optimizer steps)"
)


@dataclass(frozen=True, slots=True)
class StepStats:
    """Throughput and step-time figures over the recent window."""

    count: int  # steps in the window
    last_step: int
    steps_per_s: float | None
    samples_per_s: float | None  # None when the batch size is unknown
    median_s: float | None
    input_fraction: float | None  # None: the clock cannot see input (not measured)
    batch_size: int | None
    source: str
    # CUDA loops: GPU busy time over the wall time of the steps whose busy time is known, and
    # how it was known ("profiler": measured in a window; "estimate": from the last window)
    gpu_busy: float | None = None
    gpu_source: str = ""


def step_stats(
    steps: Sequence[StepSample],
    window_s: float = STATS_WINDOW_S,
    host: Mapping[str, float] | None = None,
    host_samples: int = 0,
) -> StepStats | None:
    """Figures over the steps that ran in the last ``window_s`` up to the newest one
    (``host``: the loop's host-time split, for model-call steps' input share)."""
    if not steps:
        return None
    last = steps[-1]
    # Steps that ran inside the window: a long step that merely ended in it would count its
    # whole duration against a window it mostly lies before.
    cutoff = last.ts - window_s - 1e-9
    recent = [s for s in steps if s.ts - s.duration_s >= cutoff] or [last]
    busy = sum(max(s.duration_s, 0.0) for s in recent)
    # Durations run from the end of one step to the end of the next, so they tile the
    # wall-clock time: their sum is the time the window's steps took.
    rate = len(recent) / busy if busy > 0 else None
    batch = next((s.batch_size for s in reversed(recent) if s.batch_size), None)
    timed = [s for s in recent if s.gpu_busy_s is not None]
    timed_s = sum(max(s.duration_s, 0.0) for s in timed)
    sources = {s.gpu_busy_source for s in timed}
    return StepStats(
        count=len(recent),
        last_step=last.step,
        steps_per_s=rate,
        samples_per_s=None if rate is None or batch is None else rate * batch,
        median_s=step_facts.percentile([s.duration_s for s in recent], 0.5),
        input_fraction=step_facts.input_fraction(recent, host, host_samples),
        batch_size=batch,
        source=last.source,
        gpu_busy=min(1.0, sum(s.gpu_busy_s or 0.0 for s in timed) / timed_s) if timed_s else None,
        gpu_source="profiler" if sources == {"profiler"} else "estimate" if sources else "",
    )


@dataclass(frozen=True, slots=True)
class StepsView:
    """What the screens show of one snapshot's steps, derived once per snapshot: the steps
    pane and the verdict panel read the same one."""

    phases: Mapping[step_facts.Phase, Sequence[StepSample]]
    host: Mapping[str, float] | None
    host_samples: int
    stats: StepStats | None
    verdict_share: tuple[str, float] | None  # the verdict's phase and its input share


_last_view: tuple[Snapshot, StepsView] | None = None


def steps_view(snapshot: Snapshot) -> StepsView:
    """The steps figures of ``snapshot`` (the last one's kept: each refresh asks twice)."""
    global _last_view
    if _last_view is not None and _last_view[0] is snapshot:
        return _last_view[1]
    stacks = snapshot.stacks
    host = stacks.host_split if stacks is not None else None
    host_n = stacks.host_samples if stacks is not None else 0
    phases = step_facts.by_phase(snapshot.steps)
    main = step_facts.main_phase(phases)
    # the main phase's figures: an evaluation pass never mixes into them
    stats = step_stats(phases[main] if main else snapshot.steps, host=host, host_samples=host_n)
    share = _verdict_share(snapshot)
    if stats is not None and share is not None:
        stats = replace(stats, input_fraction=share[1])
    view = StepsView(phases, host, host_n, stats, share)
    _last_view = (snapshot, view)
    return view


def _verdict_share(snapshot: Snapshot) -> tuple[str, float] | None:
    """The verdict's phase and input share, when it was judged from steps: the screen says
    that one fact with one number (the verdict's window; at a session's end, the session)."""
    verdict = snapshot.verdict
    ev = verdict.evidence if verdict is not None else None
    if not isinstance(ev, ProcessEvidence) or ev.input_fraction is None:
        return None
    return ev.phase or "train", float(ev.input_fraction)


def shown_stats(snapshot: Snapshot) -> StepStats | None:
    """The step figures a screen shows (the steps pane and the verdict's evidence line): the
    recent steps' of the main phase, the input share the verdict's."""
    return steps_view(snapshot).stats


def human_seconds(seconds: float | None) -> str:
    """A step time: ``0.0123`` -> ``"12.3 ms"``, ``1.5`` -> ``"1.50 s"``."""
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        ms = seconds * 1e3
        return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{seconds:.2f} s"


def human_rate(value: float | None, unit: str) -> str:
    """``3.21 steps/s``; large rates lose their decimals."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"


def stats_text(stats: StepStats) -> Text:
    """One line: steps/s, samples/s, median step time and the input share."""
    parts: list[Text] = [
        Text.assemble((human_rate(stats.steps_per_s, "steps/s"), BOLD)),
    ]
    if stats.samples_per_s is not None:
        parts.append(Text(human_rate(stats.samples_per_s, "samples/s")))
    parts.append(Text.assemble("median ", (human_seconds(stats.median_s), BOLD)))
    if stats.input_fraction is not None:
        parts.append(
            Text.assemble(
                ("input wait ", INPUT_STYLE), (f"{stats.input_fraction:.0%}", INPUT_STYLE + BOLD)
            )
        )
    if stats.gpu_busy is not None:
        parts.append(
            Text.assemble(("GPU busy ", GPU_STYLE), (f"{stats.gpu_busy:.0%}", GPU_STYLE + BOLD))
        )
    parts.append(Text(f"step {stats.last_step}", AXIS_STYLE))
    return Text(" · ").join(parts)


def gpu_strip(steps: Sequence[StepSample], width: int) -> Text | None:
    """One row under the chart: each step's GPU-busy fraction (0..100% as ▁..█), aligned with
    its bar; None when no step has one. A step whose busy time is unknown is blank."""
    columns = max(0, width - AXIS_W)
    shown = list(steps)[-columns:] if columns else []
    if not any(s.gpu_busy_s is not None for s in shown):
        return None
    gap = 0 < len(steps) * 2 <= columns
    cells: list[tuple[str, Style | None]] = []
    for s in shown:
        f = s.gpu_busy_fraction
        cells.append((" " if f is None else BLOCKS[max(1, round(f * 8))], GPU_STYLE))
        if gap:
            cells.append((" ", None))
    cells = [(" ", None)] * (columns - len(cells)) + cells
    line = Text("GPU".rjust(AXIS_W - 2) + " │", AXIS_STYLE)
    return append_runs(line, cells)


def _scale(durations: Sequence[float]) -> float:
    """The chart's top: the 95th percentile, so one slow warm-up step does not flatten the rest."""
    ordered = sorted(d for d in durations if d > 0)
    if not ordered:
        return 1.0
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return max(p95 * 1.1, ordered[-1] if len(ordered) < 5 else 0.0, 1e-9)


def _column(total: float, wait: float, scale: float, height: int) -> list[tuple[str, Style]]:
    """One step's bar, bottom cell first: input wait at the bottom, compute on top."""
    units = height * 8
    clipped = total > scale * 1.0001
    t = min(units, max(0, round(total / scale * units)))
    if total > 0 and t == 0:
        t = 1  # every step that happened shows
    i = min(t, max(0, round(min(wait, total) / scale * units)))
    cells: list[tuple[str, Style]] = []
    for row in range(height):
        lo = row * 8
        if t <= lo:
            cells.append((" ", Style()))
        elif i >= lo + 8:
            cells.append(("█", INPUT_STYLE))
        elif i <= lo:
            cells.append((BLOCKS[min(t - lo, 8)], COMPUTE_STYLE))
        elif t >= lo + 8:
            # The cell where input wait ends and compute begins: both colours in one cell.
            cells.append(
                (BLOCKS[i - lo], Style(color=INPUT_STYLE.color, bgcolor=COMPUTE_STYLE.color))
            )
        else:
            style = INPUT_STYLE if (i - lo) * 2 >= (t - lo) else COMPUTE_STYLE
            cells.append((BLOCKS[t - lo], style))
    if clipped and cells:
        cells[-1] = ("▲", CLIPPED_STYLE)
    return cells


def step_chart(steps: Sequence[StepSample], width: int, height: int) -> list[Text]:
    """A stacked bar per step, newest at the right edge, with a time axis on the left.

    Few steps get a gap after each bar so they read as separate steps; many steps fill the
    width one column each.
    """
    width = max(0, width)
    height = max(1, height)
    columns = max(0, width - AXIS_W)
    gap = 0 < len(steps) * 2 <= columns
    shown = list(steps)[-columns:] if columns else []
    scale = _scale([s.duration_s for s in shown])
    blank: list[tuple[str, Style]] = [(" ", Style())] * height
    grid: list[list[tuple[str, Style]]] = []
    for s in shown:
        grid.append(_column(s.duration_s, s.input_wait_s, scale, height))
        if gap:
            grid.append(blank)
    # Newest at the right edge: the eye looks there for "now".
    grid = [blank] * (columns - len(grid)) + grid
    lines: list[Text] = []
    for row in range(height - 1, -1, -1):
        if row == height - 1:
            label = human_seconds(scale)
        elif row == 0:
            label = "0"
        elif height >= 6 and row == (height - 1) // 2:
            label = human_seconds(scale * (row + 1) / height)
        else:
            label = ""
        tick = "┤" if label else "│"
        line = Text()
        line.append(label.rjust(AXIS_W - 2)[: AXIS_W - 2] + " " + tick, AXIS_STYLE)
        lines.append(append_runs(line, (column[row] for column in grid)))
    return lines


def legend(count: int, width: int, gpu: bool = False) -> Text:
    """The line under the chart: colours and how many steps are drawn."""
    text = Text(" " * AXIS_W)
    text.append("█", INPUT_STYLE)
    text.append(" input wait  ")
    text.append("█", COMPUTE_STYLE)
    text.append(" compute  ")
    if gpu:
        text.append("▆", GPU_STYLE)
        text.append(" GPU busy  ")
    text.append("▲", CLIPPED_STYLE)
    text.append(" off scale  ", AXIS_STYLE)
    text.append(f"last {count} steps →", AXIS_STYLE)
    text.truncate(width)
    return text


class StepChart(LineCachedWidget):
    """The per-step bar chart; it fills the height it is given."""

    DEFAULT_CSS = """
    StepChart { height: 1fr; width: 1fr; min-height: 3; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.steps: tuple[StepSample, ...] = ()
        self.message: str | None = None

    def show(self, steps: tuple[StepSample, ...], message: str | None) -> None:
        """Replace the steps drawn (``message`` instead of a chart when there are none)."""
        self.steps = steps
        self.message = message
        self.redraw()

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())

    def text_lines(self) -> list[Text]:
        """The chart rows, then the legend (or the message alone)."""
        if self.message is not None:
            return [Text(self.message, DIM)]
        width, height = self.size.width, self.size.height
        strip = gpu_strip(self.steps, width)
        rows = [] if strip is None else [strip]
        chart = step_chart(self.steps, width, max(1, height - 1 - len(rows)))
        shown = min(len(self.steps), max(0, width - AXIS_W))
        return [*chart, *rows, legend(shown, width, gpu=strip is not None)]


class StepsSummary(LineCachedWidget):
    """One line of step figures."""

    DEFAULT_CSS = """
    StepsSummary { height: 1; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.stats: StepStats | None = None

    def show(self, stats: StepStats | None) -> None:
        """Replace the figures."""
        self.stats = stats
        self.redraw()

    def render(self) -> Text:
        if self.stats is None:
            return Text()
        text = stats_text(self.stats)
        text.truncate(self.size.width)
        return text

    def text_lines(self) -> list[Text]:
        """The figures, as one line."""
        return [self.render()]


@dataclass(frozen=True, slots=True)
class PhaseRow:
    """One phase's figures over the recent steps."""

    phase: str  # "train", "eval", "inference"
    count: int
    input_fraction: float | None
    median_s: float | None
    p90_s: float | None
    p99_s: float | None


def phase_rows(
    phases: Mapping[step_facts.Phase, Sequence[StepSample]],
    host: Mapping[str, float] | None = None,
    host_samples: int = 0,
) -> list[PhaseRow]:
    """Each phase's figures apart (an evaluation pass never mixes into training's)."""
    rows = []
    for phase, group in phases.items():
        durations = [s.duration_s for s in group]
        rows.append(
            PhaseRow(
                phase,
                len(group),
                step_facts.input_fraction(group, host, host_samples),
                step_facts.percentile(durations, 0.5),
                step_facts.percentile(durations, 0.9),
                step_facts.percentile(durations, 0.99),
            )
        )
    return sorted(rows, key=lambda r: step_facts.PHASES.index(r.phase))


def phases_lines(rows: Sequence[PhaseRow], split: Mapping[str, float] | None) -> list[Text]:
    """The phase table (phase, steps, input wait, p50 = median, p90, p99) and the compute
    split."""
    lines: list[Text] = []
    if rows:
        lines.append(
            Text(
                f"{'phase':<10}{'steps':>6}{'input':>7}{'p50':>10}{'p90':>10}{'p99':>10}",
                AXIS_STYLE,
            )
        )
    for r in rows:
        wait = "-" if r.input_fraction is None else f"{r.input_fraction:.0%}"
        line = Text(f"{r.phase:<10}", BOLD)
        line.append(f"{r.count:>6}")
        line.append(f"{wait:>7}", INPUT_STYLE)
        line.append(
            f"{human_seconds(r.median_s):>10}{human_seconds(r.p90_s):>10}"
            f"{human_seconds(r.p99_s):>10}"
        )
        lines.append(line)
    if split is not None:
        line = Text("compute ", COMPUTE_STYLE)
        line.append(
            " · ".join(f"{name} {split[name]:.0%}" for name in COMPUTE_PARTS if name in split)
        )
        lines.append(line)
    return lines


COMPUTE_PARTS = ("forward", "backward", "optimizer", "collective")
TABLE_MIN_HEIGHT = 14  # a pane this tall shows the phase table even for one phase


class StepsPhases(LineCachedWidget):
    """Per phase: steps, input wait, median, p90, p99; then the compute split."""

    DEFAULT_CSS = """
    StepsPhases { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lines: list[Text] = []

    def show(self, lines: list[Text]) -> None:
        """Replace the table."""
        grew = len(lines) != len(self.lines)
        self.lines = lines
        if grew:
            self.refresh(layout=True)
        self.redraw()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines)

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())

    def text_lines(self) -> list[Text]:
        """The table's lines, cut to the width."""
        out = []
        for line in self.lines:
            cut = line.copy()
            cut.truncate(self.size.width)
            out.append(cut)
        return out


class StepsPane(Vertical, QuietTitles):
    """Throughput line, the phases and the compute split, then the chart."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "steps"
        self.stats: StepStats | None = None
        self.summary = StepsSummary(id="steps-summary")
        self.phases = StepsPhases(id="steps-phases")
        self.chart = StepChart(id="step-chart")
        self._shown: Snapshot | None = None

    def compose(self) -> ComposeResult:
        yield self.summary
        yield self.phases
        yield self.chart

    def on_resize(self, _event: events.Resize) -> None:
        """Whether the phase table fits depends on the height: a pane first laid out (its tab
        opened) or resized after its last snapshot draws that snapshot again at its size."""
        if self._shown is not None:
            self.show(self._shown)

    def show(self, snapshot: Snapshot) -> None:
        """Draw the steps of ``snapshot`` (or why there are none)."""
        self._shown = snapshot
        steps = snapshot.steps
        view = steps_view(snapshot)
        self.stats = view.stats
        summary = self.summary
        if not steps:
            state = agent_state(snapshot.target.launched, snapshot.agent)
            message = NO_STEPS_ATTACH if state == "none" else NO_STEPS_YET
            summary.show(None)
            summary.display = False
            self.phases.show([])
            self.chart.show((), message)
            self.set_titles("steps")
            return
        summary.display = True
        summary.show(self.stats)
        rows = phase_rows(view.phases, view.host, view.host_samples)
        if view.verdict_share is not None:
            phase, share = view.verdict_share
            rows = [replace(r, input_fraction=share) if r.phase == phase else r for r in rows]
        # one phase in a short pane: its name goes in the title and the chart keeps the rows
        table = len(rows) > 1 or self.size.height >= TABLE_MIN_HEIGHT
        split = step_facts.compute_split(steps[-200:])
        self.phases.show(phases_lines(rows, split) if table else [])
        self.chart.show(steps, None)
        assert self.stats is not None
        batch = f" · batch {self.stats.batch_size}" if self.stats.batch_size else ""
        phase = f" · {rows[0].phase}" if len(rows) == 1 else ""
        self.set_titles(f"steps · {self.stats.source}{batch}{phase}")
