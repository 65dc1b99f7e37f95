"""The collector protocol: a loop in its own thread that emits immutable samples."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from sofa_top.datamodel.samples import Sample

Emit = Callable[[Sample], None]


class Collector(Protocol):
    """Runs until ``stop`` is set, calling ``emit`` with each sample; never raises for
    missing hardware or permissions (those are emitted as samples with an error/state)."""

    name: str

    def run(self, emit: Emit, stop: threading.Event) -> None: ...


# Collectors whose source can wait (the agent's steps: the agent queues and counts its own
# drops) get an emit that blocks while the hub is behind, instead of one that drops.
BACKPRESSURE = ("agent",)
