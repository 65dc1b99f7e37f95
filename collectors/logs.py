"""The launched workload's stdout/stderr, as bounded ``log`` events.

A workload that prints a lot must not grow the session without bound nor slow sofa-top: lines
are cut at ``MAX_LINE`` characters, at most ``MAX_LINES_PER_S`` are kept each second and at most
``MAX_LINES`` in all; the rest are counted and reported as a ``log-dropped`` event. The pipes
are always drained, so the workload never blocks on a full pipe.
"""

from __future__ import annotations

import os
import selectors
import threading
import time
from typing import IO

from sofa_top.collector import Emit
from sofa_top.samples import Event

MAX_LINE = 2000
MAX_LINES_PER_S = 200
MAX_LINES = 50_000


class LogCollector:
    """Reads the workload's output pipes until EOF or stop."""

    name = "logs"

    def __init__(self, streams: dict[str, IO[bytes]]) -> None:
        self.streams = streams  # "stdout"/"stderr" -> pipe
        self.kept = 0
        self.dropped = 0

    def run(self, emit: Emit, stop: threading.Event) -> None:
        sel = selectors.DefaultSelector()
        partial: dict[str, bytes] = {}
        for label, pipe in self.streams.items():
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, label)
            partial[label] = b""
        second, in_second, reported, reported_at = int(time.time()), 0, 0, 0
        open_streams = len(self.streams)
        drain_until: float | None = None
        while open_streams:
            if stop.is_set() and drain_until is None:
                # Keep what the workload wrote just before it exited (its traceback, say).
                drain_until = time.monotonic() + 1.0
            if drain_until is not None and time.monotonic() >= drain_until:
                break
            ready = sel.select(timeout=0.1 if drain_until is None else 0.02)
            if not ready and drain_until is not None:
                break
            for key, _ in ready:
                label = str(key.data)
                fileobj = key.fileobj
                fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:  # EOF: the workload closed this stream (usually: it exited)
                    sel.unregister(fileobj)
                    open_streams -= 1
                    lines = [partial[label]] if partial[label] else []
                else:
                    *lines, partial[label] = (partial[label] + chunk).split(b"\n")
                    # A line with no newline for a long while is still a line worth seeing.
                    if len(partial[label]) > MAX_LINE:
                        lines.append(partial[label])
                        partial[label] = b""
                now = time.time()
                if int(now) != second:
                    second, in_second = int(now), 0
                for raw in lines:
                    if self.kept >= MAX_LINES or in_second >= MAX_LINES_PER_S:
                        self.dropped += 1
                        continue
                    text = raw.decode("utf-8", "replace").rstrip("\r")[:MAX_LINE]
                    emit(Event(now, "log", text, {"stream": label}))
                    self.kept += 1
                    in_second += 1
            if self.dropped != reported and (not open_streams or int(time.time()) != reported_at):
                reported, reported_at = self.dropped, int(time.time())
                emit(
                    Event(
                        time.time(),
                        "log-dropped",
                        f"{self.dropped} output lines not kept",
                        {"dropped": self.dropped},
                    )
                )
        sel.close()
