"""Textual messages: the only way data reaches the dashboard's widgets."""

from __future__ import annotations

from textual.message import Message

from sofa_top.datamodel.snapshot import Snapshot


class SnapshotArrived(Message):
    """A new snapshot from the source; posted from the source's background thread."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class SourceStopped(Message):
    """The source finished ``stop()`` (posted from the stop worker); ``error`` says why not."""

    def __init__(self, error: str | None = None) -> None:
        super().__init__()
        self.error = error


class ReplayMoved(Message):
    """A replay cursor move finished (posted from the move worker)."""

    def __init__(
        self, at: float | None, end: float | None, following: bool, note: str | None = None
    ) -> None:
        super().__init__()
        self.at = at  # where the cursor landed (None: it did not move)
        self.end = end  # last recorded instant, when known
        self.following = following
        self.note = note  # said to the user, e.g. "no later verdict change"
