"""What ``compare`` says while it runs: typed events, rendered as text by the CLI and as
widgets by the TUI's optimizer panel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sofa_top.optimizers.headroom import Diagnosis
from sofa_top.optimizers.measures import RunOutcome
from sofa_top.optimizers.search import SearchResult


@dataclass(frozen=True)
class RunStarted:
    """Repeat ``repeat`` (1-based) of ``config`` starts, recording to ``session``."""

    config: str
    repeat: int
    repeats: int
    session: str


@dataclass(frozen=True)
class RunFinished:
    """Repeat ``repeat`` of ``config`` ended with ``outcome``."""

    config: str
    repeat: int
    outcome: RunOutcome


@dataclass(frozen=True)
class Diagnosed:
    """The first baseline run's input bottleneck (None: nothing to diagnose)."""

    diagnosis: Diagnosis | None


@dataclass(frozen=True)
class SearchLevelStarted:
    parallelism: int
    session: str


@dataclass(frozen=True)
class SearchLevelFinished:
    parallelism: int
    outcome: RunOutcome


@dataclass(frozen=True)
class SearchFinished:
    search: SearchResult


CompareEvent = (
    RunStarted | RunFinished | Diagnosed | SearchLevelStarted | SearchLevelFinished | SearchFinished
)
OnProgress = Callable[[CompareEvent], None]
