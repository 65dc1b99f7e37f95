"""The one interface between the data path and the UI, and what a source may also do.

A source's optional capabilities are Protocols the UI checks with ``isinstance`` (never a
``getattr`` by name, where a typo reads as "cannot"): a launch can detach and be ended by a
signal (``launch.Run``), a live session carries comparisons' measurements into its verdict
(``recording.hub.Session``), a live source knows its target before the first snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from sofa_top.datamodel.snapshot import Snapshot, TargetInfo
from sofa_top.datamodel.verdict import Measured

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


@runtime_checkable
class Detachable(Protocol):
    """A source that can end its session and leave the workload running (the quit dialog's
    "detach")."""

    def detach(self) -> None: ...


@runtime_checkable
class SignalEnded(Protocol):
    """A source that ends its own way on a signal (SIGHUP, SIGTERM; ``--keep-running``)."""

    def signalled(self, name: str) -> None: ...


@runtime_checkable
class MeasuredSink(Protocol):
    """A live session: it carries what a comparison measured into its verdict."""

    def note_measured(self, measured: Sequence[Measured]) -> None: ...


@runtime_checkable
class Targeted(Protocol):
    """A live source: it knows the workload it watches before its first snapshot."""

    @property
    def target(self) -> TargetInfo: ...


@runtime_checkable
class SessionHolder(Protocol):
    """A source that runs a session of its own (``launch.Run``: its ``session``)."""

    @property
    def session(self) -> object: ...


def target_of(source: object) -> TargetInfo | None:
    """The target ``source`` (or the session it holds) watches; None when it knows none."""
    for holder in (source, source.session if isinstance(source, SessionHolder) else None):
        if isinstance(holder, Targeted) and isinstance(holder.target, TargetInfo):
            return holder.target
    return None


def measured_sink(source: object) -> MeasuredSink | None:
    """Where ``source`` keeps what comparisons measured: the session it holds, or itself."""
    for holder in (source.session if isinstance(source, SessionHolder) else None, source):
        if isinstance(holder, MeasuredSink):
            return holder
    return None
