"""Pipeline view: the tf.data / DataLoader stages the workload runs and what the in-process
agent hooked (launch mode)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.widget import Widget

from sofa_top.agent import clocks
from sofa_top.analysis import steps as step_facts
from sofa_top.datamodel.samples import AgentInfo, PipelineSample, StepSample, agent_state
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.datamodel.workload import ModelReport
from sofa_top.tui.formatting import truncate
from sofa_top.tui.line_cache import QuietTitles
from sofa_top.tui.steps_panel import BOLD, BOTTLENECK_STYLE, DIM, human_seconds


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
    if any(step_facts.keras_clock(s.source) for s in steps) or (
        model is not None and model.keras_model
    ):
        return True
    if agent is None:
        return False
    fit = clocks.KERAS_FIT
    return any(h == fit and why != NOT_IMPORTED for h, why in agent.hooks_skipped) and (
        fit not in agent.hooks_applied
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
        in_body = step_facts.model_call(step_facts.main_source(snapshot.steps[-50:]))
        self.body.show(pipeline, snapshot.agent, snapshot.target.launched, keras, in_body)
        if pipeline is None:
            self.set_titles("input pipeline")
        else:
            bottleneck = next((s.name for s in pipeline.stages if s.is_bottleneck), None)
            title = f"input pipeline · {pipeline.framework} · {len(pipeline.stages)} stages"
            if bottleneck:
                title += f" · bottleneck {bottleneck}"
            self.set_titles(title)
