"""The workload's own source lines, for what a native call on them does.

py-spy shows no frame for a native call (``torch.multinomial``, ``.cpu()``): the sample's
innermost frame is the user's line that made it, so the line's text says what it was
(``analysis.host``, ``classify``). The lines belong to the session, never to the process: a
live session reads them from the workload's own folders (``SourceReader`` over
``SourceDirs``: its working directory and its script's) and keeps each line it read; its file
records them (meta ``source_lines``), and a replay or ``record --json`` reads the very same
lines from there (``RecordedLines``), wherever the files are now.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sofa_top.datamodel.samples import StackWindow

# a line that works on the model's output: samples or picks from it, decodes it
OUTPUT_LINE = re.compile(
    r"\b(multinomial|argmax|argmin|topk|top_k|argsort|softmax|log_softmax|batch_decode)\("
)

# a line that waits for the device or copies a tensor out: the loop syncs with the model
SYNC_LINE = re.compile(r"\.(item|cpu|numpy|tolist)\(\s*\)|\.to\(\s*['\"]cpu['\"]|synchronize\(")


class Lines(Protocol):
    """Where the analysis reads a line of the workload's source."""

    def line(self, filename: str, line: int) -> str:
        """The text of ``line`` of ``filename`` as py-spy named it ("" when not known)."""
        ...


def _read(path: str, line: int) -> str:
    try:
        return linecache.getline(path, line)
    except (OSError, UnicodeDecodeError, ValueError):
        return ""


@dataclass(frozen=True, slots=True)
class SourceDirs:
    """The workload's files on this machine: a path py-spy names relative to the workload's
    ``sys.path`` (a script as ``train.py``: its folder is ``sys.path[0]``) is looked for in
    ``dirs``, first match wins; an absolute one is read as it is. No dirs: absolute only."""

    dirs: tuple[str, ...] = ()

    @staticmethod
    def of(cmdline: Sequence[str], cwd: str) -> SourceDirs:
        """The folders of a workload run as ``cmdline`` in ``cwd``: its script's, then ``cwd``."""
        script = next((a for a in cmdline[1:] if a.endswith(".py")), None)
        dirs = [os.path.dirname(os.path.join(cwd, script))] if script else []
        return SourceDirs(tuple(dict.fromkeys((*dirs, cwd))))

    def line(self, filename: str, line: int) -> str:
        """``Lines.line`` from the disk."""
        if os.path.isabs(filename) or filename.startswith("<"):
            return _read(filename, line)
        for d in self.dirs:
            text = _read(os.path.join(d, filename), line)
            if text:
                return text
        return ""


def workload_dirs(pid: int, cmdline: Sequence[str] | None = None) -> SourceDirs:
    """The folders of the running process ``pid`` (its command line: ``cmdline``, else read
    from /proc): its script's and its working directory, or sofa-top's where that cannot be
    read (the process is gone, or another user's)."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = os.getcwd()
    if cmdline is None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            cmdline = ()
    return SourceDirs.of(cmdline, cwd)


class SourceReader:
    """A live session's lines: read from ``dirs`` once each, and kept (``read``) for its
    file, so that a replay reads what this session read."""

    def __init__(self, dirs: SourceDirs) -> None:
        self.dirs = dirs
        self.read: dict[tuple[str, int], str] = {}
        self._written = 0  # lines of ``read`` already handed to ``unwritten``

    def line(self, filename: str, line: int) -> str:
        """``Lines.line``: the disk's text the first time, the same text after."""
        key = (filename, line)
        text = self.read.get(key)
        if text is None:
            text = self.read[key] = self.dirs.line(filename, line)
        return text

    def read_leaves(self, window: StackWindow) -> None:
        """Read the innermost line of each of ``window``'s stacks: the only lines the analysis
        reads, so the session's file holds every line any later reading of it asks for."""
        for c in window.stacks:
            if c.frames:
                self.line(c.frames[-1].filename, c.frames[-1].line)

    def unwritten(self) -> list[list[object]] | None:
        """Every line read as ``[file, line, text]`` when some were read since the last call
        (the session file's ``source_lines``), else None."""
        if len(self.read) == self._written:
            return None
        self._written = len(self.read)
        return [[f, n, text] for (f, n), text in self.read.items()]


@dataclass(frozen=True, slots=True)
class RecordedLines:
    """The lines a session read, as its file recorded them; a line it never read is ""."""

    lines: Mapping[tuple[str, int], str] = field(default_factory=dict)

    @staticmethod
    def from_json(value: object) -> RecordedLines | None:
        """A file's ``source_lines`` (None when it has none: a file of an older version)."""
        if not isinstance(value, list):
            return None
        lines = {
            (r[0], r[1]): r[2]
            for r in value
            if isinstance(r, list)
            and len(r) == 3
            and isinstance(r[0], str)
            and isinstance(r[1], int)
            and isinstance(r[2], str)
        }
        return RecordedLines(lines)

    def line(self, filename: str, line: int) -> str:
        """``Lines.line`` from the record."""
        return self.lines.get((filename, line), "")


def session_lines(meta: Mapping[str, object]) -> Lines:
    """The lines of a recorded session: those it recorded; a file of an older version, which
    recorded none, reads its workload's folders as they are now (its script's, relative to
    this directory: the file does not say where it ran)."""
    recorded = RecordedLines.from_json(meta.get("source_lines"))
    if recorded is not None:
        return recorded
    target = meta.get("target")
    cmdline = target.get("cmdline") if isinstance(target, dict) else None
    args = [a for a in cmdline if isinstance(a, str)] if isinstance(cmdline, list) else []
    return SourceDirs.of(args, os.getcwd())


ABSOLUTE_ONLY = SourceDirs()  # no workload's folders: a file named by its absolute path only
