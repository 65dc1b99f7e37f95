"""The one interface between the data path and the UI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sofa_top.datamodel.snapshot import Snapshot

OnSnapshot = Callable[[Snapshot], None]


class SnapshotSource(Protocol):
    """Something that produces snapshots in the background (the live session hub, a replay, or a
    fake in tests). ``on_snapshot`` is called from a background thread about once a second; the
    TUI wraps it in ``App.post_message``."""

    session_path: str

    def start(self, on_snapshot: OnSnapshot) -> None:
        """Begin producing snapshots; returns at once."""
        ...

    def stop(self) -> None:
        """Stop collecting, flush and finalize the session. Idempotent."""
        ...
