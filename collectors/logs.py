"""The launched workload's stdout/stderr, as bounded ``log`` events.

The workload writes to plain files, not pipes: if sofa-top dies, a pipe would hand the workload
SIGPIPE at its next print, and a profiler must never take its workload down. This collector
tails the files.

A workload that prints a lot must not grow the session without bound nor slow sofa-top: lines
are cut at ``MAX_LINE`` characters, at most ``MAX_LINES_PER_S`` are kept each second and at most
``MAX_LINES`` in all; the rest are counted and reported as a ``log-dropped`` event.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import BinaryIO

from sofa_top.collectors.base import Emit
from sofa_top.model.samples import Event

MAX_LINE = 2000
MAX_LINES_PER_S = 200
MAX_LINES = 50_000
POLL_S = 0.1
READ_CHUNK = 1 << 20  # per stream per poll; a flood is read in bounded bites


class LogCollector:
    """Tails the workload's output files until stop (then reads what is left)."""

    name = "logs"

    def __init__(self, streams: dict[str, Path]) -> None:
        self.streams = streams  # "stdout"/"stderr" -> file the workload writes
        self.kept = 0
        self.dropped = 0
        self._second = 0
        self._in_second = 0

    def run(self, emit: Emit, stop: threading.Event) -> None:
        files: dict[str, BinaryIO] = {}
        partial: dict[str, bytes] = {}
        cut: set[str] = set()  # streams whose current line was kept (cut) before its newline
        try:
            for label, path in self.streams.items():
                files[label] = path.open("rb")
                partial[label] = b""
            reported, reported_at = 0, 0.0
            while True:
                stopping = stop.is_set()
                got = False
                for label, f in files.items():
                    chunk = f.read(READ_CHUNK)
                    if not chunk:
                        continue
                    got = True
                    if label in cut:
                        # the rest of a line already kept: up to its newline it is no new line
                        _, newline, chunk = chunk.partition(b"\n")
                        if not newline:
                            continue
                        cut.discard(label)
                    *lines, partial[label] = (partial[label] + chunk).split(b"\n")
                    # A long line with no newline yet is still worth seeing (cut, once).
                    if len(partial[label]) > MAX_LINE:
                        lines.append(partial[label])
                        partial[label] = b""
                        cut.add(label)
                    self._keep(label, lines, emit)
                if self.dropped != reported and (stopping or time.monotonic() - reported_at >= 1.0):
                    reported, reported_at = self.dropped, time.monotonic()
                    emit(
                        Event(
                            time.time(),
                            "log-dropped",
                            f"{self.dropped} output lines not kept",
                            {"dropped": self.dropped},
                        )
                    )
                if stopping and not got:
                    # Keep the workload's last words (a traceback, say), even without a newline.
                    for label, rest in partial.items():
                        self._keep(label, [rest] if rest else [], emit)
                    break
                if not got:
                    stop.wait(POLL_S)
        except OSError as exc:
            emit(Event(time.time(), "log-error", f"cannot read workload output: {exc}"))
        finally:
            for f in files.values():
                f.close()

    def _keep(self, label: str, lines: list[bytes], emit: Emit) -> None:
        now = time.time()
        if int(now) != self._second:
            self._second, self._in_second = int(now), 0
        for raw in lines:
            if self.kept >= MAX_LINES or self._in_second >= MAX_LINES_PER_S:
                self.dropped += 1
                continue
            text = raw.decode("utf-8", "replace").rstrip("\r")[:MAX_LINE]
            emit(Event(now, "log", text, {"stream": label}))
            self.kept += 1
            self._in_second += 1
