"""The workload's output reaches sofa-top as it is printed (stdlib only).

``sofa-top launch`` gives the workload plain files as stdout and stderr (a pipe would SIGPIPE
the workload once sofa-top is gone). Python block-buffers ``sys.stdout`` on a file, so without
``PYTHONUNBUFFERED`` a line printed now shows up 8 KiB later, or never if the workload is
stopped. Two things fix that without changing what the workload sees:

* ``line_buffer``: ``sys.stdout`` and ``sys.stderr`` are reconfigured with
  ``line_buffering=True`` when they are regular files (not a terminal, a pipe or a socket:
  those are left exactly as they are). A write that holds ``\\n`` or ``\\r`` is flushed at
  once, so lines and progress-bar updates arrive live. ``isatty()`` stays False, so libraries
  that draw differently on a terminal (tqdm, Keras' progress bar) behave as they would when
  the output goes to a file; only the flush timing changes.
* ``flush``: the agent's drain thread flushes those two streams every ``flush_interval_s``, so
  a partial line (``print(..., end="")``) is written within 0.1 s, and nothing is left in a
  buffer when sofa-top stops the workload with SIGTERM (whose default action exits without
  flushing). No signal handler is installed: ``signal.getsignal(SIGTERM)`` stays what the
  workload expects, and frameworks that chain to a previous handler (Lightning) are
  unaffected. A fork (DataLoader workers) waits for a flush in progress, so no child inherits
  a buffer lock held by the drain thread.

Why not a pty: it would make ``isatty()`` True (colours, ``\\b``-drawn bars, different
logging) and hand the workload SIGHUP or EIO once sofa-top and the pty's other end are gone.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
from typing import IO, Any

_streams: list[IO[Any]] = []  # the streams made line-buffered, flushed by the drain thread
_fork_lock = threading.Lock()
_registered = False


def _is_file(stream: Any) -> bool:
    try:
        if stream.isatty():
            return False
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return False  # closed, replaced by an object without a descriptor, ...


def line_buffer() -> list[str]:
    """Line-buffer ``sys.stdout``/``sys.stderr`` where they are regular files; their names."""
    global _registered
    done: list[str] = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        reconfigure = getattr(stream, "reconfigure", None)
        if stream is None or reconfigure is None or not _is_file(stream):
            continue
        try:
            if not getattr(stream, "line_buffering", False):
                reconfigure(line_buffering=True)
        except (OSError, ValueError):
            continue
        _streams.append(stream)
        done.append(name)
    if _streams and not _registered and hasattr(os, "register_at_fork"):
        _registered = True
        os.register_at_fork(
            before=_fork_lock.acquire,
            after_in_parent=_fork_lock.release,
            after_in_child=_after_fork_child,
        )
    return done


def _after_fork_child() -> None:
    global _fork_lock
    _fork_lock = threading.Lock()  # the parent's is held by the forking thread, not ours
    _streams.clear()  # a forked child has no drain thread; it flushes as Python does


def flush() -> None:
    """Flush the line-buffered streams (the drain thread calls this; never raises)."""
    if not _streams:
        return
    with _fork_lock:
        for stream in _streams:
            with contextlib.suppress(Exception):  # closed or broken: nothing to keep
                stream.flush()
