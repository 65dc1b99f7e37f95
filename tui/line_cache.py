"""Widgets that repaint only the lines whose drawing changed.

A dashboard redraws every second, but most of what it shows does not change from one second
to the next. Textual repaints a whole widget on ``refresh()``: its ``render()``, every line
through the styles cache, and every cell through the compositor. ``LineCachedWidget`` draws
its ``render()`` into strips itself, compares them with what is on screen, and refreshes
only the lines that differ (nothing when nothing changed). A widget whose render is lines of
text can also hand them over one by one: a line that did not change is not drawn again.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Self

from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import Static


def text_key(text: Text) -> Hashable:
    """Everything about ``text`` that its drawing depends on."""
    return (
        text.plain,
        tuple(text.spans),
        text.style,
        text.justify,
        text.overflow,
        text.no_wrap,
        text.end,
        text.tab_size,
    )


class LineCachedWidget(Widget):
    """A ``Widget`` whose subclasses call ``redraw()`` instead of ``refresh()`` for new data.

    ``render()`` stays the single description of what the widget shows (tests read it); a
    full ``refresh()`` from anywhere (a resize, a style or selection change) drops the cached
    strips, so they are never staler than Textual's own cache would be.
    """

    _strips: list[Strip] | None = None
    _strips_key: tuple[Size, object] | None = None
    # Drawn lines of text_lines() by text_key, for the size and style in _strips_key.
    _line_strips: dict[Hashable, Strip] | None = None

    def text_lines(self) -> Sequence[Text] | None:
        """The lines ``render()`` joins with newlines, when it is text (None: it is not).

        Each line is then drawn on its own and reused while it stays the same.
        """
        return None

    def _cache_key(self) -> tuple[Size, object]:
        return (self.size, self.visual_style)

    def _draw(self, key: tuple[Size, object]) -> list[Strip]:
        width, height = self.size
        lines = self.text_lines() if self.text_selection is None else None
        if lines is not None:
            strips = self._draw_lines(key, lines[:height])
            if strips is not None:
                return strips
        # What Widget._render_content does, without touching the widget's own render cache.
        self._line_strips = None
        # markup as Widget's default (these widgets render Text, where markup does not apply)
        visual = visualize(self, self.render(), markup=True)
        return Visual.to_strips(self, visual, width, height, self.visual_style)

    def _draw_lines(self, key: tuple[Size, object], lines: Sequence[Text]) -> list[Strip] | None:
        """Strips for ``lines``, drawing only those not drawn before (None: a line wraps)."""
        cache = self._line_strips if self._strips_key == key and self._line_strips else {}
        keys = [(y, text_key(line)) for y, line in enumerate(lines)]
        missing = {y for y, line_key in enumerate(keys) if line_key not in cache}
        drawn: dict[Hashable, Strip] = {}
        if missing:
            # One pass over the new lines, in place: their strips carry their position (for
            # selections), and the setup of a pass costs more than the empty lines between.
            text = Text("\n").join(
                [line if y in missing else Text() for y, line in enumerate(lines)]
            )
            visual = visualize(self, text)
            new = Visual.to_strips(self, visual, self.size.width, None, self.visual_style)
            if len(new) != len(lines):
                return None  # a line wrapped: strips and lines no longer pair up
            drawn.update((keys[y], new[y]) for y in missing)
        strips: list[Strip] = []
        for line_key in keys:
            strip = drawn.get(line_key)
            if strip is None:
                strip = drawn[line_key] = cache[line_key]
            strips.append(strip)
        self._line_strips = drawn
        return strips

    def redraw(self) -> None:
        """The state behind ``render()`` changed: repaint the lines that now look different."""
        old = self._strips
        key = self._cache_key()
        if old is None or not self.is_mounted or self._strips_key != key:
            self.refresh()
            return
        new = self._draw(key)
        if len(new) != len(old):
            self.refresh()
            return
        self._strips = new
        width = self.size.width
        start: int | None = None
        for y, (before, after) in enumerate(zip(old, new, strict=True)):
            if before == after:
                if start is not None:
                    super().refresh(Region(0, start, width, y - start))
                    start = None
            elif start is None:
                start = y
        if start is not None:
            super().refresh(Region(0, start, width, len(new) - start))

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        if repaint and not regions:
            self._strips = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._strips = None
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        key = self._cache_key()
        if self._strips is None or self._strips_key != key:
            self._strips = self._draw(key)
            self._strips_key = key
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)


class QuietRefresh(Widget):
    """A widget whose whole-area refreshes can be left out while ``_quiet`` is set, for
    changes that repaint just the lines they touch themselves.

    List it after the widget class (``class Pane(Vertical, QuietRefresh)``): Textual takes a
    widget's default CSS and type selectors from the first base class only.
    """

    _quiet = False  # True while a change runs whose whole-area refresh is left out

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        if self._quiet and not regions and not layout and not recompose:
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


class QuietTitles(QuietRefresh):
    """A pane whose border title and subtitle can change without repainting the whole pane.

    Textual repaints a widget's full area on every title assignment (a container: everything
    inside it too, even for an unchanged title); a pane whose title counts samples changes
    it every second. ``set_titles`` repaints only the border line a changed title sits on.
    """

    def set_titles(self, title: str | None = None, subtitle: str | None = None) -> None:
        """Change the border title and/or subtitle (None leaves one as it is)."""
        rows: list[int] = []
        outer = self.outer_size
        self._quiet = True
        try:
            if title is not None and self.border_title != title:
                self.border_title = title
                rows.append(0)
            if subtitle is not None and self.border_subtitle != subtitle:
                self.border_subtitle = subtitle
                rows.append(outer.height - 1)
        finally:
            self._quiet = False
        if not rows:
            return
        if not self.is_mounted or not outer:
            self.refresh()
            return
        # Regions are relative to the content area: the border lies in the gutter around it.
        gutter = self.styles.gutter
        for row in rows:
            self.refresh(Region(-gutter.left, row - gutter.top, outer.width, 1))


def update_static(static: Static, text: Text) -> None:
    """``static.update(text)``, unless it shows that text already.

    Every ``Static.update`` costs a layout pass over the whole screen, even for the same text.
    """
    current = static.content
    if isinstance(current, Text) and text_key(current) == text_key(text):
        return
    static.update(text)
