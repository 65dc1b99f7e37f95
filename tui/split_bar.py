"""The input / compute / python / idle split of sampled time, drawn as one coloured bar."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rich.style import Style
from rich.text import Text

from sofa_top.datamodel.samples import STACK_CLASSES
from sofa_top.tui.line_cache import LineCachedWidget

CLASS_COLORS: dict[str, str] = {
    "input": "#d7af00",
    "compute": "#5faf5f",
    "python": "#5f87d7",
    "idle": "#6c6c6c",
}
SHORT_NAMES: dict[str, str] = {"input": "in", "compute": "comp", "python": "py", "idle": "idle"}
EMPTY_STYLE = Style(color="grey62", italic=True)


def class_style(klass: str) -> Style:
    """Foreground colour of a stack class (for table cells)."""
    return Style(color=CLASS_COLORS.get(klass, "white"))


def _cells(fractions: list[float], width: int) -> list[int]:
    # Largest remainder keeps the segments summing to exactly the bar width.
    raw = [f * width for f in fractions]
    cells = [math.floor(r) for r in raw]
    leftover = width - sum(cells)
    order = sorted(range(len(raw)), key=lambda i: raw[i] - cells[i], reverse=True)
    for i in order[:leftover]:
        cells[i] += 1
    return cells


def split_bar(split: Mapping[str, float] | None, width: int) -> Text:
    """A ``width``-cell bar with one segment per class, labelled where the label fits."""
    if width <= 0:
        return Text()
    values = [max(float((split or {}).get(k, 0.0)), 0.0) for k in STACK_CLASSES]
    total = sum(values)
    if total <= 0:
        return Text("no stack samples in this window"[:width], EMPTY_STYLE)
    cells = _cells([v / total for v in values], width)
    bar = Text()
    for klass, value, n in zip(STACK_CLASSES, values, cells, strict=True):
        if n <= 0:
            continue
        pct = f"{100 * value / total:.0f}%"
        label = ""
        for candidate in (f"{klass} {pct}", f"{SHORT_NAMES[klass]} {pct}", pct):
            if len(candidate) <= n:
                label = candidate
                break
        style = Style(
            color="white" if klass == "idle" else "black", bgcolor=CLASS_COLORS[klass], bold=True
        )
        bar.append(label.center(n), style)
    return bar


class SplitBar(LineCachedWidget):
    """One line: where the sampled threads spent their time."""

    DEFAULT_CSS = """
    SplitBar { height: 1; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.split: Mapping[str, float] | None = None

    def show(self, split: Mapping[str, float] | None) -> None:
        """Replace the split drawn (None draws nothing: the pane explains why)."""
        self.split = split
        self.redraw()

    def render(self) -> Text:
        if self.split is None:
            return Text()
        return split_bar(self.split, self.size.width)

    def text_lines(self) -> list[Text]:
        """The bar, as one line."""
        return [self.render()]
