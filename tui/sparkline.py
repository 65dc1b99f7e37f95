"""Fixed-scale sparklines drawn with block characters (pure functions, no Textual).

Textual's ``Sparkline`` scales to the data's own maximum; a profiler needs an absolute scale
("of 8 cores", "of 80 GiB") so that a flat line at 5 % does not look like a saturated core.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence

from rich.style import Style
from rich.text import Text

from sofa_top.datamodel.snapshot import Point

BLOCKS = " ▁▂▃▄▅▆▇█"
_LEVELS = len(BLOCKS) - 1

LOW = Style(color="green")
MID = Style(color="yellow")
HIGH = Style(color="red")
BASELINE = Style(color="grey30")


def level_style(fraction: float) -> Style:
    """Green / yellow / red by load, for utilisation-like series."""
    if fraction >= 0.85:
        return HIGH
    if fraction >= 0.5:
        return MID
    return LOW


def _point_ts(point: Point) -> float:
    return point[0]


def resample(
    points: Sequence[Point],
    *,
    end: float,
    window: float,
    columns: int,
    hold: float = 1.5,
) -> list[float | None]:
    """Bucket ``points`` into ``columns`` equal time slices of the ``window`` ending at ``end``.

    A slice takes the maximum of its points, so a one-second spike survives a 15-minute zoom.
    An empty slice repeats the previous value when that is at most ``hold`` seconds older,
    so a 1 Hz series stays continuous when a slice is shorter than a second; older gaps and
    ``None`` values (failed readings) stay empty.
    """
    if columns <= 0 or window <= 0:
        return []
    start = end - window
    step = window / columns
    values: list[float | None] = [None] * columns
    latest: list[float | None] = [None] * columns  # timestamp of the newest point per slice
    broken = [False] * columns
    # Points are in time order: skip those before the window without looking at each (a
    # 15-minute history is mostly outside a 60 s window).
    first = bisect_right(points, start, key=_point_ts)
    before: Point | None = points[first - 1] if first else None
    for ts, value in points[first:]:
        if ts > end:
            break
        index = min(columns - 1, int((ts - start) / step))
        if value is None:
            broken[index] = True
            continue
        current = values[index]
        values[index] = value if current is None else max(current, value)
        latest[index] = ts
    last_ts: float | None = None
    last_value: float | None = None
    if before is not None and before[1] is not None:
        last_ts, last_value = before
    for index in range(columns):
        if values[index] is not None:
            last_ts, last_value = latest[index], values[index]
            continue
        if broken[index]:
            # A failed reading breaks the line rather than being papered over.
            last_ts, last_value = None, None
            continue
        slice_start = start + index * step
        if last_ts is not None and last_value is not None and slice_start - last_ts <= hold:
            values[index] = last_value
    return values


def bar_char(fraction: float) -> str:
    """One vertical block for a 0..1 fraction; anything above zero shows at least one eighth."""
    level = round(min(max(fraction, 0.0), 1.0) * _LEVELS)
    if fraction > 0 and level == 0:
        level = 1
    return BLOCKS[level]


def append_runs(text: Text, cells: Iterable[tuple[str, Style | None]]) -> Text:
    """Append ``cells`` to ``text``, one span per run of equally styled cells.

    A span per cell would look the same, but every span costs when Textual draws the text.
    """
    run: list[str] = []
    run_style: Style | None = None
    for char, style in cells:
        # Identity first: cells mostly share a few style objects, and Style.__eq__ costs.
        if run and style is not run_style and style != run_style:
            text.append("".join(run), run_style)
            run = []
        run.append(char)
        run_style = style
    if run:
        text.append("".join(run), run_style)
    return text


def sparkline(
    values: Sequence[float | None],
    *,
    vmax: float,
    style: Style | None = None,
    height: int = 1,
) -> list[Text]:
    """Render ``values`` as ``height`` rows (top first) on the fixed scale ``0..vmax``.

    With ``style`` None each column is coloured by its load; zero draws a dim baseline so an
    idle series is distinguishable from "no data" (blank).
    """
    height = max(1, height)
    rows: list[list[tuple[str, Style | None]]] = [[] for _ in range(height)]
    scale = vmax if vmax > 0 else 1.0
    for value in values:
        if value is None:
            for row in rows:
                row.append((" ", None))
            continue
        fraction = min(max(value / scale, 0.0), 1.0)
        eighths = math.ceil(fraction * _LEVELS * height) if fraction > 0 else 0
        column_style = style if style is not None else level_style(fraction)
        for r, row in enumerate(rows):
            base = (height - 1 - r) * _LEVELS
            fill = min(max(eighths - base, 0), _LEVELS)
            if fill == 0 and r == height - 1:
                row.append(("▁", BASELINE))
            else:
                row.append((BLOCKS[fill], column_style))
    return [append_runs(Text(), row) for row in rows]


def core_strip(per_core: Sequence[float], width: int) -> tuple[Text, int]:
    """One bar per core (0..100 %), averaging neighbours when there are more cores than cells.

    Few cores get up to three cells each (two of bar, one of gap) so they read as separate bars.
    Returns the strip and how many cores each bar stands for.
    """
    n = len(per_core)
    if n == 0 or width <= 0:
        return Text(), 1
    group = max(1, math.ceil(n / width))
    bars = math.ceil(n / group)
    cells = max(1, min(3, width // bars))
    bar_w = cells - 1 if cells == 3 else cells
    strip = Text()
    for start in range(0, n, group):
        chunk = per_core[start : start + group]
        fraction = sum(chunk) / len(chunk) / 100.0
        strip.append(bar_char(fraction) * bar_w, level_style(fraction))
        if cells > bar_w:
            strip.append(" ")
    strip.rstrip()
    return strip, group
