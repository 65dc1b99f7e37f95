"""Bounded in-memory history for the UI, fed by the same samples as the store.

Each series keeps per-second buckets (the mean of the points in that second) for the longest
zoom (15 minutes), so memory stays flat over hours whatever the sampling rate.
"""

from __future__ import annotations

import math
from collections import deque

from sofa_top.datamodel.snapshot import Point
from sofa_top.datamodel.units import Timestamp

HISTORY_S = 15 * 60


class SeriesRing:
    """Per-second means of one series over the last ``HISTORY_S`` seconds."""

    __slots__ = ("_buckets", "_cur_n", "_cur_sec", "_cur_sum", "last")

    def __init__(self, seconds: int = HISTORY_S) -> None:
        self._buckets: deque[Point] = deque(maxlen=seconds)
        self._cur_sec: int | None = None
        self._cur_sum = 0.0
        self._cur_n = 0
        self.last: float | None = None

    def add(self, ts: Timestamp, value: float | None) -> None:
        sec = math.floor(ts)
        if self._cur_sec is not None and sec > self._cur_sec:
            self._flush()
        if self._cur_sec is None or sec > self._cur_sec:
            self._cur_sec = sec
        if value is not None and math.isfinite(value):
            self._cur_sum += value
            self._cur_n += 1
            self.last = value

    def _flush(self) -> None:
        if self._cur_sec is None:
            return
        mean = self._cur_sum / self._cur_n if self._cur_n else None
        self._buckets.append((float(self._cur_sec), mean))
        self._cur_sum, self._cur_n = 0.0, 0

    def points(self) -> tuple[Point, ...]:
        """Completed seconds plus the current partial one, oldest first."""
        pts = tuple(self._buckets)
        if self._cur_sec is not None and self._cur_n:
            pts += ((float(self._cur_sec), self._cur_sum / self._cur_n),)
        return pts


class Rings:
    """All series rings, created on first use; ``proc.*`` series stay out (the store has them)."""

    def __init__(self, seconds: int = HISTORY_S, max_series: int = 512) -> None:
        self._seconds = seconds
        self._max = max_series
        self.series: dict[str, SeriesRing] = {}

    def add(self, name: str, ts: Timestamp, value: float | None) -> None:
        if name.startswith("proc."):
            return
        ring = self.series.get(name)
        if ring is None:
            if len(self.series) >= self._max:
                return
            ring = self.series[name] = SeriesRing(self._seconds)
        ring.add(ts, value)

    def history(self) -> dict[str, tuple[Point, ...]]:
        return {name: ring.points() for name, ring in self.series.items()}
