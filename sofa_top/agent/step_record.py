"""One step as the agent's clocks see it (stdlib only; the agent also runs on Python 3.8, so a
class with slots rather than a slotted dataclass)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the agent also runs on Python 3.8: no runtime alias with ``|``
    # a wait's CPU seconds, or ``sched.wait_times``' (CPU, schedstat run, schedstat queue)
    Wait = float | tuple[float, ...]  # < 0: unknown


class StepRecord:
    """A step: which clock saw it, its number and bounds (``perf_counter``), the seconds it
    waited for input, its batch size and the process's CPU during the wait. ``Agent.push`` adds
    the seconds blocked in collectives and the compute spans; a CUDA loop's observer the GPU
    span, busy time and the busy time's source (``BUSY_SOURCES``). None: not measured."""

    __slots__ = (
        "backward",
        "batch_size",
        "busy_source",
        "collective",
        "cpu",
        "end",
        "flags",
        "forward",
        "gpu_busy",
        "gpu_span",
        "gpu_timed",
        "optimizer",
        "source",
        "start",
        "step",
        "wait",
    )

    def __init__(
        self, source: str, step: int, start: float, end: float, wait: float, batch_size: Any,
        cpu: Wait = -1.0,
    ) -> None:  # fmt: skip
        self.source = source
        self.step = step
        self.start = start
        self.end = end
        self.wait = wait
        self.batch_size = batch_size
        self.cpu = cpu
        self.collective: float | None = None
        self.forward: float | None = None
        self.backward: float | None = None
        self.optimizer: float | None = None
        self.flags = 0  # phase evidence (``spans``)
        self.gpu_timed = False  # the CUDA observer saw it (its GPU fields go on the wire)
        self.gpu_span: float | None = None
        self.gpu_busy: float | None = None
        self.busy_source = 0

    def set_spans(self, spans: tuple[float, float, float, int]) -> None:
        """``spans.ComputeSpans.take``'s (forward, backward, optimizer, flags); < 0: none."""
        f, b, o, self.flags = spans
        self.forward = f if f >= 0 else None
        self.backward = b if b >= 0 else None
        self.optimizer = o if o >= 0 else None

    def __repr__(self) -> str:
        return f"StepRecord({self.source!r}, {self.step}, {self.start}, {self.end}, {self.wait})"
