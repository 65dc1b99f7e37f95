"""Verdict panel: why the workload is slow, the numbers behind it and the code change to try."""

from __future__ import annotations

from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.geometry import Size

from sofa_top.agent.toggles import toggle_name
from sofa_top.analysis.load import machine_load
from sofa_top.analysis.ranks import headline_verdict
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.datamodel.verdict import Verdict
from sofa_top.datamodel.verdict_evidence import (
    GpuUnderutilizedEvidence,
    ProcessEvidence,
    StragglerEvidence,
)
from sofa_top.tui.line_cache import LineCachedWidget
from sofa_top.tui.steps_panel import human_rate, human_seconds, shown_stats

RED = "#d75f5f"
AMBER = "#d7af00"
GREEN = "#5faf5f"
BLUE = "#5f87d7"
GREY = "#8a8a8a"

COMPACT_LINES = 3  # 80x24: headline, evidence, first recommendation (wrapped: more lines)
ROOMY_LINES = 5  # tall terminals: headline, evidence, three recommendations (each wrapped)
ROOMY_RECOMMENDATIONS = ROOMY_LINES - 2
_WRAP = Console(width=400, color_system=None)  # only measures: Text.wrap needs a console

DIM = Style(color="grey62")
WAITING = Style(color="grey62", italic=True)
BOLD = Style(bold=True)
FIX_STYLE = Style(color="cyan", bold=True)
TOGGLE_STYLE = Style(color="grey62", italic=True)


def kind_color(verdict: Verdict) -> str:
    """The verdict's colour: red for what costs most, green for a healthy compute-bound job."""
    kind = verdict.kind
    if kind == "straggler":
        return RED  # the whole job runs at the slowest rank's pace
    if kind == "balanced":
        return GREEN
    if kind == "input-bound":
        return RED if verdict.severity != "moderate" else AMBER
    if kind in ("memory-pressure", "cpu-oversubscribed"):
        return RED
    if kind == "gpu-underutilized":
        return AMBER
    if kind == "compute-bound":
        return GREEN
    if kind == "python-overhead":
        return BLUE
    return GREY  # idle, unknown and any kind this version does not know


def badge(verdict: Verdict) -> Text:
    """`` INPUT-BOUND · high `` in the kind's colour."""
    label = verdict.kind.upper()
    if verdict.severity:
        label += f" · {verdict.severity}"
    fg = "white" if kind_color(verdict) in (RED, BLUE) else "black"
    text = Text()  # a span, not the base style: the headline appended later must not inherit it
    text.append(f" {label} ", Style(color=fg, bgcolor=kind_color(verdict), bold=True))
    return text


def headline(verdict: Verdict) -> str:
    """The headline without the ``kind:`` prefix the badge already says."""
    text = verdict.headline
    prefix = f"{verdict.kind}:"
    if text.startswith(prefix):
        text = text[len(prefix) :].strip()
    return text or verdict.kind


def shown_verdict(snapshot: Snapshot | None) -> Verdict | None:
    """The verdict the panel leads with: a straggler, when the job has one, says more about a
    distributed job than its processes' averaged verdict."""
    if snapshot is None:
        return None
    return headline_verdict(snapshot.verdict, snapshot.rank_verdict)


def straggler_parts(ev: StragglerEvidence) -> list[Text]:
    """The straggler's numbers: its own bottleneck, what the others wait, what it costs."""
    parts: list[Text] = []
    own, cause = ev.verdict, ev.cause
    what = f"{own} ({cause})" if cause and cause != own else str(own or "slow")
    parts.append(Text.assemble("rank ", (str(ev.rank), BOLD), f" {what}"))
    wait = ev.job.others_collective_wait_fraction
    if wait is not None:
        parts.append(Text.assemble("others wait ", (f"{wait:.0%}", BOLD), " in collectives"))
    parts.append(
        Text.assemble(
            (human_rate(ev.job.steps_per_s, "steps/s"), BOLD),
            " → ",
            (human_rate(ev.steps_per_s_if_matched, "steps/s"), BOLD),
            " at the median rank's pace",
        )
    )
    parts.append(Text(f"{ev.job.ranks} ranks", DIM))
    return parts


def evidence_parts(verdict: Verdict | None, snapshot: Snapshot) -> list[Text]:
    """The key numbers: input share, bottleneck stage, CPU saturation, GPU use, throughput.
    Each is the verdict's (a number its evidence lacks is not shown; before the first verdict,
    the load as ``analysis.load`` makes it); the throughput is the steps pane's."""
    evidence = verdict.evidence if verdict is not None else None
    if isinstance(evidence, StragglerEvidence):
        return straggler_parts(evidence)
    ev = evidence if isinstance(evidence, ProcessEvidence) else None
    parts: list[Text] = []
    stats = shown_stats(snapshot)
    input_fraction = stats.input_fraction if stats is not None else None
    if input_fraction is None and ev is not None:
        input_fraction = ev.input_fraction
    if input_fraction is not None:
        parts.append(Text.assemble("input wait ", (f"{input_fraction:.0%}", BOLD), " of step"))
    elif ev is not None and ev.stacks is not None:
        share = ev.stacks.input_share
        parts.append(Text.assemble("input ", (f"{share:.0%}", BOLD), " of samples"))
        if ev.stacks.compute_share:
            parts.append(Text.assemble("compute ", (f"{ev.stacks.compute_share:.0%}", BOLD)))
    if ev is not None and ev.gpu_steps is not None:
        # a CUDA loop: how busy the GPU is, and why it idles
        parts.append(Text.assemble("GPU busy ", (f"{ev.gpu_steps.gpu_busy_fraction:.0%}", BOLD)))
        if isinstance(ev, GpuUnderutilizedEvidence) and ev.gpu_idle is not None:
            parts.append(Text.assemble("cause ", (ev.gpu_idle.cause, BOLD)))
    stage = ev.bottleneck_stage if ev is not None else None
    if stage is None and snapshot.pipeline is not None:
        stage = next((s.name for s in snapshot.pipeline.stages if s.is_bottleneck), None)
    # A pipeline stage is only "the bottleneck" while input is what the job waits for.
    if stage and (verdict is None or verdict.kind == "input-bound"):
        parts.append(Text.assemble("bottleneck ", (str(stage), BOLD)))
    cause = ev.input_cause if ev is not None else None
    if cause is not None:
        # why the input is slow: the cores it keeps busy while the loop waits for it
        parts.append(
            Text.assemble("input ", (cause.cause, BOLD), f" ({cause.cpu_cores:.1f} cores busy)")
        )
    load = ev.load if ev is not None else None
    if verdict is None:
        # no verdict yet: the machine's load as a verdict would carry it (one derivation)
        tree = snapshot.process.tree_cpu_percent if snapshot.process is not None else None
        load = machine_load(tree, snapshot.cpu_count, snapshot.gpu, None)
    if load is not None and load.cpu_saturation is not None:
        # A share of the whole machine (not "% of one core" as the timelines count).
        parts.append(Text.assemble("CPU saturation ", (f"{load.cpu_saturation:.0%}", BOLD)))
    if load is not None and load.gpu_util_percent is not None:
        parts.append(Text.assemble("GPU ", (f"{load.gpu_util_percent:.0f}%", BOLD)))
    elif snapshot.gpu is not None and snapshot.gpu.status != "ok":
        parts.append(Text("no GPU", DIM))
    if stats is not None:
        parts.append(
            Text.assemble(
                (human_rate(stats.steps_per_s, "steps/s"), BOLD),
                f" median {human_seconds(stats.median_s)}",
            )
        )
    return parts


def _fit(parts: list[Text], width: int) -> Text:
    """Join evidence with separators, dropping trailing parts that do not fit whole."""
    line = Text()
    for part in parts:
        candidate = line.copy()
        if line.plain:
            candidate.append(" · ", DIM)
        candidate.append_text(part)
        if candidate.cell_len > width and line.plain:
            break
        line = candidate
    line.truncate(width)
    return line


def recommendation_text(verdict: Verdict, index: int, *, numbered: bool) -> Text:
    """``fix: <code change>  [toggle]``."""
    rec = verdict.recommendations[index]
    head = f"{index + 1}. " if numbered else "fix: "
    text = Text.assemble((head, FIX_STYLE), rec.text)
    if rec.toggle:
        text.append(f"  [{toggle_name(rec.toggle)}]", TOGGLE_STYLE)
    return text


def _breaks(plain: str, first: int, rest: int) -> list[int]:
    """Offsets where lines of ``first`` then ``rest`` cells start, breaking after spaces
    (a word longer than a line is cut where the line ends)."""
    out: list[int] = []
    start, width = 0, first
    while len(plain) - start > width:
        cut = plain.rfind(" ", start, start + width + 1)
        end = cut + 1 if cut > start else start + width
        out.append(end)
        start, width = end, rest
    return out


def wrap_recommendation(text: Text, width: int, indent: int) -> list[Text]:
    """``text`` on as many lines of ``width`` as it needs (a code change cut short says
    something else: "private_threadpool_size=1…" was 16), continuation lines indented."""
    if text.cell_len <= width:
        return [text]
    pad = min(indent, max(0, width // 4))
    parts = text.divide(_breaks(text.plain, max(1, width), max(1, width - pad)))
    out = [parts[0]]
    for part in parts[1:]:
        part.rstrip()
        out.append(Text(" " * pad) + part)
    out[0].rstrip()
    return out


def verdict_lines(
    verdict: Verdict | None,
    snapshot: Snapshot | None,
    width: int,
    *,
    roomy: bool,
    replay: bool = False,
) -> list[Text]:
    """The panel's lines at ``width`` cells (``COMPACT_LINES`` or ``ROOMY_LINES`` of them)."""
    count = ROOMY_LINES if roomy else COMPACT_LINES
    lines: list[Text] = []
    if verdict is None:
        if snapshot is None:
            lines.append(Text("verdict: waiting for the first snapshot…", WAITING))
        elif replay:
            lines.append(Text("no verdict at this point of the recording", WAITING))
        else:
            lines.append(Text("verdict: judging… (it needs a few seconds of samples)", WAITING))
        if snapshot is not None:
            evidence = evidence_parts(None, snapshot)
            if evidence:
                lines.append(_fit(evidence, width))
    else:
        first = badge(verdict)
        first.append(" ")
        first.append(headline(verdict), BOLD)
        confidence = Text(f" confidence {verdict.confidence:.0%}", DIM)
        room = width - confidence.cell_len
        if first.cell_len <= room:
            first.append(" " * (room - first.cell_len))
            first.append_text(confidence)
        first.truncate(width, overflow="ellipsis")
        lines.append(first)
        lines.append(_fit(evidence_parts(verdict, snapshot) if snapshot else [], width))
        recs = len(verdict.recommendations)
        wrapped: list[Text] = []
        if roomy:
            for i in range(min(recs, ROOMY_RECOMMENDATIONS)):
                line = recommendation_text(verdict, i, numbered=True)
                if i == ROOMY_RECOMMENDATIONS - 1 and recs > ROOMY_RECOMMENDATIONS:
                    line.append(f"  (+{recs - ROOMY_RECOMMENDATIONS} more)", DIM)
                wrapped += wrap_recommendation(line, width, len(f"{i + 1}. "))
        elif recs:
            line = recommendation_text(verdict, 0, numbered=False)
            if recs > 1:
                line.append(f"  (+{recs - 1} more: 2 steps view)", DIM)
            wrapped += wrap_recommendation(line, width, len("fix: "))
        elif verdict.kind == "compute-bound":
            lines.append(Text("nothing to fix in the input pipeline", DIM))
        for line in lines:
            line.truncate(width, overflow="ellipsis")
        lines += wrapped
    for line in lines:
        line.truncate(width, overflow="ellipsis")  # wrapped lines already fit
        line.no_wrap = True
    lines.extend(Text() for _ in range(count - len(lines)))
    return lines


class VerdictPanel(LineCachedWidget):
    """The first thing under the header: the verdict for the last ~10 s (or the cursor)."""

    DEFAULT_CSS = """
    VerdictPanel { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.snapshot: Snapshot | None = None
        self.roomy = False
        self.replay = False
        self._lines = COMPACT_LINES

    def show(self, snapshot: Snapshot | None) -> None:
        """Draw the verdict of ``snapshot``."""
        self.snapshot = snapshot
        verdict = shown_verdict(snapshot)
        self.set_class(verdict is not None and kind_color(verdict) == RED, "-alarm")
        before = self._lines
        self._lines = self.line_count
        if self._lines != before:
            self.refresh(layout=True)  # a recommendation that wraps onto more lines
        self.redraw()  # the verdict holds for seconds: most snapshots repaint nothing here

    def set_roomy(self, roomy: bool) -> None:
        """Tall terminals list up to three recommendations."""
        self.roomy = roomy
        self.set_class(roomy, "-roomy")
        self.refresh(layout=True)

    @property
    def line_count(self) -> int:
        """Lines of content (the border, when roomy, comes on top): more than the layout's
        minimum when a recommendation wraps."""
        return len(self.text_lines())

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        snapshot = self.snapshot
        verdict = snapshot.verdict if snapshot is not None else None
        lines = verdict_lines(
            verdict, snapshot, max(1, width), roomy=self.roomy, replay=self.replay
        )
        return len(lines)

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())

    def text_lines(self) -> list[Text]:
        """Headline, evidence and recommendations (see ``verdict_lines``)."""
        snapshot = self.snapshot
        verdict = shown_verdict(snapshot)
        width = max(1, self.size.width)
        return verdict_lines(verdict, snapshot, width, roomy=self.roomy, replay=self.replay)
