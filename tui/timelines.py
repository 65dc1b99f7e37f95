"""Timelines pane: process-tree CPU, per-core strip, RSS, I/O and GPU over a zoomable window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size

from sofa_top.datamodel.samples import CudaSample, GpuDevice, GpuSample
from sofa_top.datamodel.snapshot import Point, Snapshot
from sofa_top.recording.series import (
    GPU_MEM_USED,
    GPU_POWER,
    GPU_UTIL,
    SYS_MEM_USED,
    TREE_CPU,
    TREE_READ_RATE,
    TREE_RSS,
    TREE_WRITE_RATE,
    gpu_series,
)
from sofa_top.tui.formatting import human_bytes, human_rate, percent, truncate, window_label
from sofa_top.tui.line_cache import LineCachedWidget, QuietTitles
from sofa_top.tui.sparkline import core_strip, resample, sparkline

ZOOM_WINDOWS: tuple[int, ...] = (30, 60, 300, 900)
DEFAULT_WINDOW = 60

RSS_STYLE = Style(color="magenta")
READ_STYLE = Style(color="cyan")
WRITE_STYLE = Style(color="bright_blue")
MEM_STYLE = Style(color="magenta")
POWER_STYLE = Style(color="yellow")
MESSAGE_STYLE = Style(color="grey62", italic=True)
LABEL_STYLE = Style(bold=True)


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One labelled line (or block of lines) of the timelines pane."""

    label: str
    value: str = ""
    series: tuple[Point, ...] | None = None
    vmax: float | None = None  # None: scale to the window's own maximum
    style: Style | None = None  # None: colour by load
    strip: tuple[float, ...] | None = None  # per-core percentages instead of a series
    message: str | None = None  # text-only row (e.g. "no NVIDIA GPU: ...")
    height: int = 1


def next_zoom(window: int) -> int:
    """The zoom window after ``window`` (wrapping around)."""
    try:
        index = ZOOM_WINDOWS.index(window)
    except ValueError:
        return DEFAULT_WINDOW
    return ZOOM_WINDOWS[(index + 1) % len(ZOOM_WINDOWS)]


def _last(points: Sequence[Point]) -> float | None:
    for _, value in reversed(points):
        if value is not None:
            return value
    return None


def _pair(used: float | None, total: float | None) -> str:
    if used is None:
        return "-"
    if not total:
        return human_bytes(used)
    used_text, _, used_unit = human_bytes(used).partition(" ")
    total_text, _, total_unit = human_bytes(total).partition(" ")
    if used_unit == total_unit:
        return f"{used_text}/{total_text} {total_unit}"
    return f"{human_bytes(used)}/{human_bytes(total)}"


def gpu_message(gpu: GpuSample) -> str:
    """The single line shown instead of GPU timelines when there is no usable GPU."""
    if gpu.status in ("no-gpu", "no-driver"):
        message = gpu.message.strip()
        if message.lower().startswith("no nvidia gpu"):
            return message
        return f"no NVIDIA GPU: {message}" if message else "no NVIDIA GPU"
    return f"GPU error: {gpu.message or 'unknown'}"


def _gpu_rows(snapshot: Snapshot, device: GpuDevice, *, detailed: bool) -> list[TimelineRow]:
    history = snapshot.history
    util_series = history.get(gpu_series(device.index, GPU_UTIL), ())
    mem_series = history.get(gpu_series(device.index, GPU_MEM_USED), ())
    power_series = history.get(gpu_series(device.index, GPU_POWER), ())
    util = device.util if device.util is not None else _last(util_series)
    mem = device.mem_used if device.mem_used is not None else _last(mem_series)
    power = device.power_w if device.power_w is not None else _last(power_series)
    power_text = "-" if power is None else f"{power:.0f} W"
    name = f"GPU{device.index}"
    if not detailed:
        mem_text = "-" if mem is None else human_bytes(mem).replace(" ", "")
        summary = f"{percent(util)} {mem_text} {power_text.replace(' ', '')}"
        if device.throttle:
            summary += " ▼"  # clocks held down (the detailed rows say why)
        return [TimelineRow(name, summary, util_series, 100.0)]
    if device.power_limit_w and power is not None:
        power_text = f"{power:.0f}/{device.power_limit_w:.0f} W"
    rows = [
        TimelineRow(f"{name} util", percent(util), util_series, 100.0),
        TimelineRow(
            f"{name} mem",
            _pair(mem, device.mem_total),
            mem_series,
            float(device.mem_total) if device.mem_total else None,
            MEM_STYLE,
        ),
        TimelineRow(f"{name} power", power_text, power_series, None, POWER_STYLE),
    ]
    return rows + [
        TimelineRow(f"{name} {label}", message=text) for label, text in gpu_notes(device)
    ]


def gpu_notes(device: GpuDevice) -> list[tuple[str, str]]:
    """Text rows for what NVML says beyond the timelines: the target's share, clocks and why
    they are held down, MIG, and the readings that failed (with NVML's reason)."""
    notes: list[tuple[str, str]] = []
    target = []
    if device.target_mem is not None:
        target.append(human_bytes(device.target_mem))
    if device.target_util is not None:
        target.append(f"{device.target_util:.0f}% SM")
    if (
        target and device.target_scope is not None
    ):  # a reading of the collector that tells the scope
        text = "target " + " · ".join(target)
        if device.target_scope == "device":
            text += " (device totals: NVML's PIDs are not this namespace's)"
        notes.append(("tgt", text))
    clocks = []
    if device.sm_clock_mhz is not None:
        top = f"/{device.sm_clock_max_mhz:.0f}" if device.sm_clock_max_mhz else ""
        clocks.append(f"SM {device.sm_clock_mhz:.0f}{top} MHz")
    if device.mem_clock_mhz is not None:
        clocks.append(f"mem {device.mem_clock_mhz:.0f} MHz")
    if device.temp_c is not None:
        clocks.append(f"{device.temp_c:.0f} C")
    if device.throttle:
        clocks.append("throttle " + ", ".join(t for t in device.throttle if t != "gpu-idle"))
    if clocks and (device.throttle or device.mem_clock_mhz is not None):
        notes.append(("clk", " · ".join(c for c in clocks if c != "throttle ")))
    if device.mig:
        # NVML names an instance "<device name> MIG 3g.40gb": the profile is what differs
        parts = [
            f"{m.name.rsplit(' MIG ', 1)[-1]} {_pair(m.mem_used, m.mem_total)}"
            for m in device.mig_instances
        ]
        parts = parts or ["no instances"]
        notes.append(("MIG", "on: " + ", ".join(parts)))
    if device.errors:
        missing = dict(device.errors)
        notes.append(("n/a", "; ".join(f"{f}: {why}" for f, why in sorted(missing.items()))))
    return notes


def cuda_row(cuda: CudaSample) -> TimelineRow:
    """What the agent reads of CUDA inside the workload: the allocator and the last window."""
    parts = []
    if cuda.mem_reserved is not None:
        parts.append(f"allocator {_pair(cuda.mem_reserved, cuda.mem_total)} reserved")
    if cuda.alloc_retries:
        parts.append(f"{cuda.alloc_retries} cudaMalloc retries")
    w = cuda.window
    if w is not None and w.busy_fraction is not None:
        per_step = w.kernels / max(1, w.steps)
        parts.append(f"window busy {w.busy_fraction:.0%}, {per_step:.0f} kernels/step")
    if cuda.error:
        parts.append(cuda.error)
    return TimelineRow("CUDA", message=" · ".join(parts) or cuda.device_name)


def build_rows(snapshot: Snapshot, *, roomy: bool) -> list[TimelineRow]:
    """The rows to draw for ``snapshot``; ``roomy`` (a tall terminal) adds detail."""
    history = snapshot.history
    cores = max(1, snapshot.cpu_count)
    cpu_series = history.get(TREE_CPU, ())
    process = snapshot.process
    cpu_now = process.tree_cpu_percent if process is not None else None
    if cpu_now is None:
        cpu_now = _last(cpu_series)
    core_word = "core" if cores == 1 else "cores"
    rows = [
        TimelineRow(
            "CPU",
            f"{percent(cpu_now)} of {cores} {core_word}",
            cpu_series,
            cores * 100.0,
            height=2 if roomy else 1,
        )
    ]
    system = snapshot.system
    if system is not None and system.cpu_per_core:
        value = f"sys {percent(system.cpu_total)}"
        if system.iowait is not None:
            value += f" io {percent(system.iowait)}"
        rows.append(TimelineRow("cores", value, strip=tuple(system.cpu_per_core)))
    rss_series = history.get(TREE_RSS, ())
    rss_now = process.tree_rss if process is not None else None
    rows.append(
        TimelineRow(
            "RSS",
            human_bytes(rss_now if rss_now is not None else _last(rss_series)),
            rss_series,
            None,
            RSS_STYLE,
        )
    )
    read_series = history.get(TREE_READ_RATE, ())
    write_series = history.get(TREE_WRITE_RATE, ())
    rows.append(TimelineRow("read", human_rate(_last(read_series)), read_series, None, READ_STYLE))
    rows.append(
        TimelineRow("write", human_rate(_last(write_series)), write_series, None, WRITE_STYLE)
    )
    if roomy and system is not None:
        mem_series = history.get(SYS_MEM_USED, ())
        rows.append(
            TimelineRow(
                "sys mem",
                _pair(system.mem_used, system.mem_total),
                mem_series,
                float(system.mem_total) if system.mem_total else None,
                MEM_STYLE,
            )
        )
    gpu = snapshot.gpu
    if gpu is None:
        rows.append(TimelineRow("GPU", message="waiting for the first GPU reading"))
    elif gpu.status != "ok":
        # The message names the GPU itself; without a label it fits an 80-column terminal.
        rows.append(TimelineRow("", message=gpu_message(gpu)))
    elif not gpu.devices:
        rows.append(TimelineRow("GPU", message="no GPU devices reported"))
    else:
        # Three rows per device while they fit; many GPUs get one summary row each.
        detailed = len(gpu.devices) <= (4 if roomy else 1)
        for device in gpu.devices:
            rows.extend(_gpu_rows(snapshot, device, detailed=detailed))
    if snapshot.cuda is not None:
        rows.append(cuda_row(snapshot.cuda))
    return rows


def render_rows(
    rows: Sequence[TimelineRow], *, width: int, end: float, window: float
) -> list[Text]:
    """Lay ``rows`` out at ``width`` cells: label, sparkline, value (sparklines aligned)."""
    if width <= 0:
        return [Text() for row in rows for _ in range(row.height)]
    label_w = max((len(row.label) for row in rows), default=0)
    value_w = max((len(row.value) for row in rows if row.message is None), default=0)
    spark_w = width - label_w - value_w - 2
    lines: list[Text] = []
    for row in rows:
        label = Text(row.label.ljust(label_w), LABEL_STYLE)
        if row.message is not None:
            head = label + Text(" ") if row.label else Text()
            lines.append(head + Text(truncate(row.message, width - head.cell_len), MESSAGE_STYLE))
            continue
        value = Text(row.value.rjust(value_w))
        if spark_w < 4:
            # Too narrow for a graph: the numbers alone still answer "how busy is it now".
            lines.append(label + Text(" ") + value)
            lines.extend(Text() for _ in range(row.height - 1))
            continue
        graphs: list[Text]
        if row.strip is not None:
            strip, _ = core_strip(row.strip, spark_w)
            graphs = [strip]
        else:
            points = row.series or ()
            values = resample(points, end=end, window=window, columns=spark_w)
            vmax = row.vmax
            if vmax is None:
                present = [v for v in values if v is not None]
                vmax = max(present) * 1.1 if present and max(present) > 0 else 1.0
            graphs = sparkline(values, vmax=vmax, style=row.style, height=row.height)
        blank_label = Text(" " * label_w)
        blank_value = Text(" " * value_w)
        for index, graph in enumerate(graphs):
            graph.pad_right(spark_w - graph.cell_len)
            head = label if index == 0 else blank_label
            tail = value if index == 0 else blank_value
            lines.append(head + Text(" ") + graph + Text(" ") + tail)
    return lines


class TimelineBody(LineCachedWidget):
    """Draws the rows; its height is the number of lines, so the pane can size itself."""

    DEFAULT_CSS = """
    TimelineBody { height: auto; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[TimelineRow] = []
        self.end = 0.0
        self.window = float(DEFAULT_WINDOW)
        self._cache: tuple[int, list[Text]] | None = None  # (width, lines) for the current rows

    def show(self, rows: list[TimelineRow], *, end: float, window: float) -> None:
        """Replace what is drawn."""
        before = self.line_count
        self.rows = rows
        self.end = end
        self.window = window
        self._cache = None
        if self.line_count != before:
            # A layout pass repaints the whole screen: only when the height changed.
            self.refresh(layout=True)
        else:
            self.redraw()

    @property
    def line_count(self) -> int:
        """How many terminal lines the current rows need."""
        return sum(row.height for row in self.rows)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, self.line_count)

    def text_lines(self) -> list[Text]:
        """The lines drawn: one per row (a roomy CPU row takes two)."""
        if not self.rows:
            return [Text("waiting for the first snapshot…", MESSAGE_STYLE)]
        width = self.size.width
        # Textual re-renders on focus and scroll too; resampling long series each time is waste.
        if self._cache is not None and self._cache[0] == width:
            return self._cache[1]
        lines = render_rows(self.rows, width=width, end=self.end, window=self.window)
        self._cache = (width, lines)
        return lines

    def render(self) -> Text:
        return Text("\n").join(self.text_lines())


class TimelinesPane(VerticalScroll, QuietTitles, can_focus=True):
    """The timelines pane (scrolls when many GPUs do not fit)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.window = DEFAULT_WINDOW
        self.roomy = False
        self._snapshot: Snapshot | None = None
        self.body = TimelineBody(id="timeline-body")
        self.border_title = f"timelines · last {window_label(self.window)}"

    def compose(self) -> ComposeResult:
        yield self.body

    def show(self, snapshot: Snapshot | None) -> None:
        """Draw ``snapshot`` with the current zoom window."""
        self._snapshot = snapshot
        self.set_titles(f"timelines · last {window_label(self.window)}")
        if snapshot is None:
            return
        rows = build_rows(snapshot, roomy=self.roomy)
        self.body.show(rows, end=snapshot.ts, window=float(self.window))

    def set_window(self, window: int) -> None:
        """Zoom to ``window`` seconds and redraw."""
        self.window = window
        self.show(self._snapshot)
