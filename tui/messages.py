"""Textual messages: the only way data reaches the dashboard's widgets."""

from __future__ import annotations

from textual.message import Message

from sofa_top.snapshot import Snapshot


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
