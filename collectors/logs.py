"""The launched workload's stdout/stderr, as bounded ``log`` events.

The workload writes to plain files, not pipes: if sofa-top dies, a pipe would hand the workload
SIGPIPE at its next print, and a profiler must never take its workload down. This collector
tails the files.

A workload that prints a lot must not grow the session without bound nor slow sofa-top: lines
are cut at ``MAX_LINE`` characters, at most ``MAX_LINES_PER_S`` are kept each second and at most
``MAX_LINES`` in all; the rest are counted and reported as a ``log-dropped`` event.

Carriage returns: a progress bar (tqdm, a hand-written ``\r``) rewrites one line many times
before it ends it. Only what follows the last ``\r`` is on screen, so that is all that is kept:
a finished line is one ``log`` event with its final text, and while it is still being
rewritten its current text is a ``log-progress`` event at most every ``PROGRESS_EVERY_S`` (the
live view shows it as one updating line) instead of thousands of lines. A line printed
without its newline yet (``print(..., end="")``) is shown the same way.

Output reaches these files as the workload prints it because the agent makes Python's
``sys.stdout`` line-buffered when it is a file (``sofa_top.agent.output``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import BinaryIO

from sofa_top.collectors.base import Emit
from sofa_top.datamodel.samples import Event

MAX_LINE = 2000
MAX_LINES_PER_S = 200
MAX_LINES = 50_000
POLL_S = 0.1
READ_CHUNK = 1 << 20  # per stream per poll; a flood is read in bounded bites
PROGRESS_EVERY_S = 1.0  # a line rewritten with \r is shown (and stored) at most this often


def visible(raw: bytes) -> bytes:
    """What a terminal would show of a line: the text after its last carriage return."""
    text = raw.rstrip(b"\r")
    cut = text.rfind(b"\r")
    return text if cut < 0 else text[cut + 1 :]


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
        shown: dict[str, tuple[float, bytes]] = {}  # stream -> (when, progress text shown)
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
                    *lines, rest = (partial[label] + chunk).split(b"\n")
                    if b"\r" in rest:
                        rest = b"\r" + visible(rest)  # only the last rewrite is on screen
                    partial[label] = rest
                    # A long line with no newline yet is still worth seeing (cut, once).
                    if len(rest) > MAX_LINE:
                        lines.append(rest)
                        partial[label] = b""
                        cut.add(label)
                    if lines:
                        shown.pop(label, None)
                    self._keep(label, [visible(x) for x in lines], emit)
                self._progress(partial, shown, emit)
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
                        text = visible(rest)
                        self._keep(label, [text] if text else [], emit)
                    break
                if not got:
                    stop.wait(POLL_S)
        except OSError as exc:
            emit(Event(time.time(), "log-error", f"cannot read workload output: {exc}"))
        finally:
            for f in files.values():
                f.close()

    def _progress(
        self, partial: dict[str, bytes], shown: dict[str, tuple[float, bytes]], emit: Emit
    ) -> None:
        """Show the current text of lines not finished yet (rewritten with ``\r``, or printed
        without their newline so far), at most once a second per stream."""
        now = time.monotonic()
        for label, rest in partial.items():
            text = rest[1:] if rest.startswith(b"\r") else rest
            if not text:
                continue
            when, last = shown.get(label, (now, b""))
            if label not in shown:
                shown[label] = (now, b"")  # first seen now: shown if still unfinished in 1 s
            elif text != last and now - when >= PROGRESS_EVERY_S:
                shown[label] = (now, text)
                message = text.decode("utf-8", "replace")[:MAX_LINE]
                emit(Event(time.time(), "log-progress", message, {"stream": label}))

    def _keep(self, label: str, lines: list[bytes], emit: Emit) -> None:
        now = time.time()
        if int(now) != self._second:
            self._second, self._in_second = int(now), 0
        for raw in lines:
            if self.kept >= MAX_LINES or self._in_second >= MAX_LINES_PER_S:
                self.dropped += 1
                continue
            text = raw.decode("utf-8", "replace")[:MAX_LINE]
            emit(Event(now, "log", text, {"stream": label}))
            self.kept += 1
            self._in_second += 1
