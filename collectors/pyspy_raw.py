"""Parser for py-spy's raw ("collapsed stack") output, as written by
``py-spy record --format raw --threads [--subprocesses]``.

One line per distinct stack, root first, frames joined by ``;``, then a space and the count::

    process 812:"python t.py";thread (815): MainThread;<module> (t.py:9);step (t.py:5) 84

Observed with py-spy 0.4 on Linux:

* ``process PID:"cmdline"`` frames come first, one per process from the target down to the sampled
  one, only with ``--subprocesses``.
* ``thread (TID): NAME`` (or ``thread (TID)`` when the thread has no name) comes next, only with
  ``--threads``. TID is the OS thread id in decimal; py-spy falls back to the pthread id in hex
  (``0x7F...``) where it cannot find the OS id (and always on macOS).
* Python frames are ``name (file:line)``; ``name (file)`` when the line is unknown (0) and a bare
  ``name`` when the file is empty too.

Ambiguities the format leaves, and how they are resolved: a function name must not contain ``" ("``
(Python qualified names never do); a ``;`` inside a function name or file name is kept by joining
``;``-separated pieces until they form a complete ``name (file)`` frame, so a bare ``name`` frame
(no file) is only recognised as the innermost frame; a thread name is taken up to the first ``;``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sofa_top.datamodel.samples import Frame

_FRAME_RE = re.compile(r"(.*?) \((.*)\)", re.DOTALL)
_LINE_RE = re.compile(r"(.*):(-?\d+)", re.DOTALL)
_THREAD_RE = re.compile(r"thread \((0[xX][0-9a-fA-F]+|\d+)\)(?:: (.*))?", re.DOTALL)
_PROCESS_RE = re.compile(r'process (\d+):"')


@dataclass(frozen=True, slots=True)
class RawStack:
    """One line of py-spy raw output."""

    frames: tuple[Frame, ...]  # outermost first, without the process/thread pseudo-frames
    count: int
    tid: int | None = None  # None without --threads
    thread_name: str = ""
    processes: tuple[tuple[int, str], ...] = ()  # (pid, cmdline), target first; --subprocesses

    @property
    def pid(self) -> int | None:
        """The sampled process (the innermost ``process`` frame), when py-spy named it."""
        return self.processes[-1][0] if self.processes else None


def parse_frame(text: str) -> Frame:
    """Parse one ``name (file:line)`` / ``name (file)`` / ``name`` frame."""
    m = _FRAME_RE.fullmatch(text)
    if m is None:
        return Frame(function=text, filename="", line=0)
    name, inside = m.group(1), m.group(2)
    lm = _LINE_RE.fullmatch(inside)
    if lm is not None:
        return Frame(function=name, filename=lm.group(1), line=int(lm.group(2)))
    return Frame(function=name, filename=inside, line=0)


def _split_processes(stack: str) -> tuple[tuple[tuple[int, str], ...], str]:
    """Strip the leading ``process PID:"cmdline"`` frames; return them and the rest."""
    procs: list[tuple[int, str]] = []
    while True:
        m = _PROCESS_RE.match(stack)
        if m is None:
            return tuple(procs), stack
        body_start = m.end()
        # The command line may itself contain '";': prefer the closing quote that is followed by
        # another pseudo-frame, which is what py-spy always writes after a process frame.
        end = -1
        search = body_start
        while True:
            pos = stack.find('";', search)
            if pos < 0:
                break
            after = stack[pos + 2 :]
            if after.startswith(("process ", "thread (")):
                end = pos
                break
            if end < 0:
                end = pos
            search = pos + 1
        if end < 0:
            # The process frame is the whole remaining stack (no thread, no frames).
            if stack.endswith('"'):
                procs.append((int(m.group(1)), stack[body_start:-1]))
                return tuple(procs), ""
            return tuple(procs), stack
        procs.append((int(m.group(1)), stack[body_start:end]))
        stack = stack[end + 2 :]


def _parse_tid(text: str) -> int:
    return int(text, 16) if text[:2].lower() == "0x" else int(text)


def _join_frames(pieces: list[str]) -> tuple[Frame, ...]:
    frames: list[Frame] = []
    acc: str | None = None
    for piece in pieces:
        acc = piece if acc is None else f"{acc};{piece}"
        if _FRAME_RE.fullmatch(acc) is not None:
            frames.append(parse_frame(acc))
            acc = None
    if acc is not None:
        frames.append(parse_frame(acc))
    return tuple(frames)


def parse_raw_line(line: str) -> RawStack | None:
    """Parse one raw line; None for a blank or malformed line (no trailing count)."""
    line = line.rstrip("\r\n")
    stack, sep, count_text = line.rpartition(" ")
    if not sep or not (count_text.isascii() and count_text.isdigit()):
        return None
    processes, tid, thread_name, frames = _parse_stack(stack)
    return RawStack(
        frames=frames,
        count=int(count_text),
        tid=tid,
        thread_name=thread_name,
        processes=processes,
    )


@functools.lru_cache(maxsize=1 << 14)
def _parse_stack(
    stack: str,
) -> tuple[tuple[tuple[int, str], ...], int | None, str, tuple[Frame, ...]]:
    # Cached: a window repeats the previous window's stacks with new counts, and sharing the
    # Frame tuples keeps a session's windows small in memory.
    processes, rest = _split_processes(stack)
    tid: int | None = None
    thread_name = ""
    pieces = rest.split(";") if rest else []
    if pieces:
        tm = _THREAD_RE.fullmatch(pieces[0])
        if tm is not None:
            tid = _parse_tid(tm.group(1))
            thread_name = tm.group(2) or ""
            pieces = pieces[1:]
    return processes, tid, thread_name, _join_frames(pieces)


def parse_raw(text: str | Iterable[str]) -> list[RawStack]:
    """Parse a whole raw file (its text, or an iterable of lines); malformed lines are skipped."""
    lines = text.splitlines() if isinstance(text, str) else text
    out: list[RawStack] = []
    for line in lines:
        parsed = parse_raw_line(line)
        if parsed is not None:
            out.append(parsed)
    return out


def format_frame(frame: Frame) -> str:
    """Write a frame the way py-spy does (the inverse of :func:`parse_frame`)."""
    if frame.line != 0:
        return f"{frame.function} ({frame.filename}:{frame.line})"
    if frame.filename:
        return f"{frame.function} ({frame.filename})"
    return frame.function


def format_raw_line(stack: RawStack) -> str:
    """Write a stack the way py-spy does (the inverse of :func:`parse_raw_line`)."""
    parts = [f'process {pid}:"{cmd}"' for pid, cmd in stack.processes]
    if stack.tid is not None:
        head = f"thread ({stack.tid})"
        parts.append(f"{head}: {stack.thread_name}" if stack.thread_name else head)
    parts.extend(format_frame(f) for f in stack.frames)
    return f"{';'.join(parts)} {stack.count}"
