"""Widgets that repaint only the lines whose drawing changed.

A dashboard redraws every second, but most of what it shows does not change from one second
to the next. Textual repaints a whole widget on ``refresh()``: its ``render()``, every line
through the styles cache, and every cell through the compositor. ``LineCachedWidget`` draws
its ``render()`` into strips itself, compares them with what is on screen, and refreshes
only the lines that differ (nothing when nothing changed).
"""

from __future__ import annotations

from typing import Self

from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget


class LineCachedWidget(Widget):
    """A ``Widget`` whose subclasses call ``redraw()`` instead of ``refresh()`` for new data.

    ``render()`` stays the single description of what the widget shows (tests read it); a
    full ``refresh()`` from anywhere (a resize, a style or selection change) drops the cached
    strips, so they are never staler than Textual's own cache would be.
    """

    _strips: list[Strip] | None = None
    _strips_key: tuple[Size, object] | None = None

    def _cache_key(self) -> tuple[Size, object]:
        return (self.size, self.visual_style)

    def _draw(self) -> list[Strip]:
        # What Widget._render_content does, without touching the widget's own render cache.
        width, height = self.size
        visual = visualize(self, self.render(), markup=self._render_markup)
        return Visual.to_strips(self, visual, width, height, self.visual_style)

    def redraw(self) -> None:
        """The state behind ``render()`` changed: repaint the lines that now look different."""
        old = self._strips
        if old is None or not self.is_mounted or self._strips_key != self._cache_key():
            self.refresh()
            return
        new = self._draw()
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
            self._strips = self._draw()
            self._strips_key = key
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)


def set_border_title(widget: Widget, title: str) -> None:
    """Set ``widget``'s border title; an unchanged title repaints nothing.

    Textual repaints the whole widget (a container: its full area) on every assignment, even
    of the same title; most panes set theirs on every snapshot.
    """
    if widget.border_title != title:
        widget.border_title = title


def set_border_subtitle(widget: Widget, subtitle: str) -> None:
    """Set ``widget``'s border subtitle; an unchanged subtitle repaints nothing."""
    if widget.border_subtitle != subtitle:
        widget.border_subtitle = subtitle
