"""Steps view: per-step input wait vs compute (and, in CUDA loops, how busy the GPU was),
throughput, each phase's steps (training, evaluation, inference) with their input wait and
step-time percentiles, the compute split, the tf.data / DataLoader stages and what the
in-process agent hooked (launch mode)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.geometry import Size
from textual.widget import Widget

from sofa_top.analysis import steps as step_facts
from sofa_top.model.samples import AgentInfo, PipelineSample, StepSample, agent_state
from sofa_top.model.snapshot import Snapshot
from sofa_top.model.workload import ModelReport
from sofa_top.tui.formatting import truncate
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
        median_s=_median([s.duration_s for s in recent]),
        input_fraction=step_facts.input_fraction(recent, host, host_samples),
        batch_size=batch,
        source=last.source,
        gpu_busy=min(1.0, sum(s.gpu_busy_s or 0.0 for s in timed) / timed_s) if timed_s else None,
        gpu_source="profiler" if sources == {"profiler"} else "estimate" if sources else "",
    )


def shown_stats(snapshot: Snapshot) -> StepStats | None:
    """The step figures a screen shows (the steps pane and the verdict's evidence line): the
    recent steps', with the share of each step spent waiting for input taken from the verdict
    when it was judged from steps, so that the screen says that one fact with one number (the
    verdict's window; at the end of a session: the whole session)."""
    stacks = snapshot.stacks
    host = stacks.host_split if stacks is not None else None
    host_n = stacks.host_samples if stacks is not None else 0
    phases = step_facts.by_phase(snapshot.steps)
    main = step_facts.main_phase(phases)
    # the main phase's figures: an evaluation pass never mixes into them
    stats = step_stats(phases[main] if main else snapshot.steps, host=host, host_samples=host_n)
    verdict = snapshot.verdict
    judged = verdict.evidence.get("input_fraction") if verdict is not None else None
    if stats is None or not isinstance(judged, int | float) or isinstance(judged, bool):
        return stats
    return replace(stats, input_fraction=float(judged))


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


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
                _median(durations),
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

    def compose(self) -> ComposeResult:
        yield self.summary
        yield self.phases
        yield self.chart

    def show(self, snapshot: Snapshot) -> None:
        """Draw the steps of ``snapshot`` (or why there are none)."""
        steps = snapshot.steps
        stacks = snapshot.stacks
        host = stacks.host_split if stacks is not None else None
        host_n = stacks.host_samples if stacks is not None else 0
        phases = step_facts.by_phase(steps)
        self.stats = shown_stats(snapshot)
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
        rows = phase_rows(phases, host, host_n)
        # one phase in a short pane: its name goes in the title and the chart keeps the rows
        table = len(rows) > 1 or self.size.height >= TABLE_MIN_HEIGHT
        split = step_facts.compute_split(steps[-200:])
        self.phases.show(phases_lines(rows, split) if table else [])
        self.chart.show(steps, None)
        assert self.stats is not None
        batch = f" · batch {self.stats.batch_size}" if self.stats.batch_size else ""
        phase = f" · {rows[0].phase}" if len(rows) == 1 else ""
        self.set_titles(f"steps · {self.stats.source}{batch}{phase}")


# -- pipeline and agent -------------------------------------------------------------------------


def pipeline_table(pipeline: PipelineSample, width: int) -> Table:
    """The stages, outermost first: name, kind, parallelism, buffer, time per element."""
    table = Table(
        box=None,
        expand=False,  # numbers next to the names, not across a 160-column screen
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )
    table.add_column("stage", no_wrap=True, overflow="ellipsis", max_width=max(12, width - 40))
    table.add_column("kind", no_wrap=True)
    table.add_column("parallel" if width >= 70 else "par", justify="right", no_wrap=True)
    table.add_column("buffer", justify="right", no_wrap=True)
    table.add_column("per element" if width >= 70 else "per elem", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for stage in pipeline.stages:
        marker = Text("◀ bottleneck" if width >= 60 else "◀", BOTTLENECK_STYLE)
        style = BOTTLENECK_STYLE if stage.is_bottleneck else Style()
        table.add_row(
            Text(stage.name, style),
            Text(stage.kind),
            Text("-" if stage.parallelism is None else str(stage.parallelism)),
            Text("-" if stage.buffer is None else str(stage.buffer)),
            Text(human_seconds(stage.self_time_s)),
            marker if stage.is_bottleneck else Text(""),
        )
    return table


NOT_IMPORTED = "not imported by the workload"  # the agent's reason for a hook never installed


def keras_used(
    agent: AgentInfo | None, steps: Sequence[StepSample], model: ModelReport | None = None
) -> bool:
    """Whether the workload itself uses Keras: TensorFlow imports Keras on its own, so a hook
    installed (or a ``keras`` module loaded) says nothing; a Keras fit step, a fit the hook
    saw and could not measure, or a Keras model run by torch does."""
    keras_clocks = ("keras-fit", "keras-model-call", "keras-evaluate")
    if any(s.source in keras_clocks for s in steps) or (model is not None and model.keras_model):
        return True
    if agent is None:
        return False
    return any(h == "keras-fit" and why != NOT_IMPORTED for h, why in agent.hooks_skipped) and (
        "keras-fit" not in agent.hooks_applied
    )


def agent_text(agent: AgentInfo | None, launched: bool, keras: bool = True) -> Text:
    """What the agent hooked and skipped (and why), on one line (wrapping when needed);
    without ``keras`` (the workload never used Keras) its Keras hook and module are left out."""
    if agent_state(launched, agent) == "waiting":
        return Text("agent: no report yet", DIM)
    if agent is None:
        return Text("agent: not loaded (attach mode)", DIM)
    text = Text.assemble(("agent ", BOLD), f"pid {agent.pid} · python {agent.python}")
    for name, version in agent.frameworks:
        if keras or name != "keras":
            text.append(f" · {name} {version}")
    # (a hook of a library the workload never imported says nothing: left out)
    applied = [h for h in agent.hooks_applied if keras or not h.startswith("keras-")]
    skipped = [
        (h, why)
        for h, why in agent.hooks_skipped
        if (keras or not h.startswith("keras-")) and why != NOT_IMPORTED
    ]
    if applied:
        text.append(" · hooks ")
        text.append(" ".join(f"✓{h}" for h in applied), Style(color="green"))
    if skipped:
        text.append(" · skipped ")
        text.append(
            ", ".join(f"✗{h} ({reason})" for h, reason in skipped),
            Style(color="yellow"),
        )
    if agent.dropped:
        text.append(f" · {agent.dropped} messages dropped", Style(color="red"))
    return text


class PipelineBody(Widget):
    """The stage table, or why there is none, and the agent line."""

    DEFAULT_CSS = """
    PipelineBody { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pipeline: PipelineSample | None = None
        self.agent: AgentInfo | None = None
        self.launched = False
        self.keras = False
        self.in_body = False

    def show(
        self,
        pipeline: PipelineSample | None,
        agent: AgentInfo | None,
        launched: bool,
        keras: bool = False,
        in_body: bool = False,
    ) -> None:
        """Replace what is drawn (``keras``: the workload uses Keras; ``in_body``: its steps
        come from its model calls, its input is prepared in the loop body)."""
        now = (pipeline, agent, launched, keras, in_body)
        same = now == (self.pipeline, self.agent, self.launched, self.keras, self.in_body)
        self.pipeline = pipeline
        self.agent = agent
        self.launched = launched
        self.keras = keras
        self.in_body = in_body
        if not same:  # the agent reports rarely: most seconds there is nothing to redraw
            self.refresh(layout=True)

    def _agent_lines(self, width: int) -> int:
        text = agent_text(self.agent, self.launched, self.keras)
        return max(1, math.ceil(text.cell_len / max(width, 1)))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        stages = len(self.pipeline.stages) + 1 if self.pipeline and self.pipeline.stages else 1
        note = 1 if self.pipeline is not None and self.pipeline.note else 0
        return stages + note + self._agent_lines(width)

    def render(self) -> Table:
        width = self.size.width
        grid = Table.grid(expand=True)
        grid.add_column()
        pipeline = self.pipeline
        if pipeline is None and self.in_body:
            grid.add_row(
                Text(
                    "no input pipeline: the loop prepares its input in its own body (its steps "
                    "come from its model calls; the time between them is the input's)",
                    DIM,
                )
            )
        elif pipeline is None or not pipeline.stages:
            grid.add_row(
                Text(
                    "no input-pipeline report (the agent describes tf.data pipelines and "
                    "DataLoaders in launch mode)",
                    DIM,
                )
                if pipeline is None
                else Text(f"{pipeline.framework}: no stages reported", DIM)
            )
        else:
            grid.add_row(pipeline_table(pipeline, width))
        grid.add_row(agent_text(self.agent, self.launched, self.keras))
        # Last: the first thing to scroll out of a short pane.
        if pipeline is not None and pipeline.note:
            grid.add_row(Text(truncate(pipeline.note, width), DIM))
        return grid


class PipelinePane(VerticalScroll, QuietTitles, can_focus=True):
    """Stages of the input pipeline and the agent's hooks."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "input pipeline"
        self.body = PipelineBody(id="pipeline-body")

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, snapshot: Snapshot) -> None:
        """Draw the pipeline and agent of ``snapshot``."""
        pipeline = snapshot.pipeline
        keras = keras_used(snapshot.agent, snapshot.steps, snapshot.model)
        in_body = step_facts.main_source(snapshot.steps[-50:]) in step_facts.MODEL_CALL_SOURCES
        self.body.show(pipeline, snapshot.agent, snapshot.target.launched, keras, in_body)
        if pipeline is None:
            self.set_titles("input pipeline")
        else:
            bottleneck = next((s.name for s in pipeline.stages if s.is_bottleneck), None)
            title = f"input pipeline · {pipeline.framework} · {len(pipeline.stages)} stages"
            if bottleneck:
                title += f" · bottleneck {bottleneck}"
            self.set_titles(title)
