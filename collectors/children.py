"""Nothing sofa-top starts outlives it: the helpers that make every child process end with the
process that started it.

- ``guard(pid)`` / ``release(pid)``: a child (and the process group it leads) is stopped by
  this process's watchdog (``watchdog.py``, one per process, started on the first guard) if
  this process dies before it released the child, SIGKILL included: SIGTERM, then SIGKILL
  5 s later. Release a child once it is reaped (its PID may be reused after that). This needs
  nothing in the child before its ``exec`` (py-spy is a Rust binary), no ``preexec_fn``
  (unsafe with threads, see the ``subprocess`` docs) and, unlike ``PR_SET_PDEATHSIG`` set in a
  child, does not fire when the *thread* that started the child ends (a Textual worker, an
  executor's thread).
- ``die_with_parent()`` and ``Lifeline``: for a process of sofa-top's own (a page's viewer),
  which ends itself when what it serves is gone: its parent (``PR_SET_PDEATHSIG`` and a poll
  of ``getppid``), its stdin (the page's pipe), an owner's PID or a channel's path.

The normal ends stay where they are (each stop path kills and reaps its own children); this
is what still holds when that code never runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

WATCHDOG = str(Path(__file__).with_name("watchdog.py"))
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
LIFELINE_POLL_S = 0.5
SEND_TIMEOUT_S = 2.0


class _Watchdog:
    """This process's watchdog and the PIDs it guards (re-sent if the watchdog is restarted)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.owner = 0  # the PID that started it: a forked child needs its own
        self.guarded: set[int] = set()

    def _start(self) -> socket.socket | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", WATCHDOG, str(os.getpid())],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the terminal's Ctrl-C and hangup are not for it
            )
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(SEND_TIMEOUT_S)  # it forked: the watchdog goes on in its child
        ours.settimeout(SEND_TIMEOUT_S)
        self.sock, self.owner = ours, os.getpid()
        for pid in self.guarded:
            self._send(ours, b"+%d" % pid)
        return ours

    @staticmethod
    def _send(sock: socket.socket, message: bytes) -> bool:
        """Whether the watchdog is there (a stuck one loses this message, and is kept: closing
        this end would stop everything it guards)."""
        try:
            sock.send(message)
            return True
        except TimeoutError:
            return True
        except OSError:
            return False

    def tell(self, pid: int, guard: bool) -> None:
        with self.lock:
            if self.owner != os.getpid():  # forked: the parent's watchdog is not ours
                self.sock, self.proc, self.guarded = None, None, set()
            if guard:
                self.guarded.add(pid)
            elif pid in self.guarded:
                self.guarded.discard(pid)
            else:
                return
            sock = self.sock
            if sock is None and not guard:
                return
            if sock is not None and self._send(sock, b"%s%d" % (b"+" if guard else b"-", pid)):
                return
            if sock is not None:
                sock.close()
                self.sock = None
            self._start()  # (re)started: it was told every guarded PID


_WATCHDOG = _Watchdog()


def prepare() -> None:
    """Start this process's watchdog now (the first ``guard`` would): call it before starting
    a child, so that the guard right after the start is a message, not a process start."""
    with _WATCHDOG.lock:
        if _WATCHDOG.owner != os.getpid():  # forked: the parent's watchdog is not ours
            _WATCHDOG.sock, _WATCHDOG.proc, _WATCHDOG.guarded = None, None, set()
        if _WATCHDOG.sock is None:
            _WATCHDOG._start()


def guard(pid: int) -> None:
    """Have ``pid`` (and the process group it leads) stopped if this process dies before
    ``release(pid)``. Best effort: where the watchdog cannot start, nothing else changes."""
    _WATCHDOG.tell(pid, guard=True)


def release(pid: int) -> None:
    """``pid`` was reaped (or is handed on, meant to outlive this process): stop guarding it."""
    _WATCHDOG.tell(pid, guard=False)


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> bool:
    """Ask the kernel to send this process ``sig`` when its parent dies (Linux
    ``PR_SET_PDEATHSIG``; it fires when the parent *thread* that forked this process ends).
    Whether it was set. Call it in the process itself: a parent that died before the call is
    seen by ``Lifeline``'s poll of ``getppid``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _exists(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[:1] != [b"Z"]
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _hangs_up(fd: int) -> bool:
    """Whether ``fd`` is a pipe, socket or terminal, whose hangup means its writer is gone."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class Lifeline:
    """Watches, in a daemon thread, what this process lives for, and ends it when one is gone:
    its parent (``parent``: the PID it had at the start), ``pids`` (an owner), ``paths`` (a
    channel), and its stdin's hangup (``stdin``: a pipe whose writer closed it). Then
    ``on_gone(reason)`` runs (in a thread of its own: it asks the process to stop cleanly), and
    ``exit_after_s`` later the process exits (``os._exit``) if it is still there."""

    def __init__(
        self,
        on_gone: Callable[[str], None],
        *,
        parent: int | None = None,
        pids: Sequence[int] = (),
        paths: Sequence[str] = (),
        stdin: bool = False,
        exit_after_s: float = 5.0,
        exit_code: int = 1,
        poll_s: float = LIFELINE_POLL_S,
    ) -> None:
        self.on_gone = on_gone
        self.parent = parent
        self.pids = tuple(pids)
        self.paths = tuple(paths)
        self.stdin = stdin and _hangs_up(0)
        self.exit_after_s = exit_after_s
        self.exit_code = exit_code
        self.poll_s = poll_s
        self.gone: str | None = None

    def start(self) -> Lifeline:
        """Start watching (returns self)."""
        threading.Thread(target=self._run, name="sofa-top-lifeline", daemon=True).start()
        return self

    def check(self) -> str | None:
        """What is gone now, in words (None: all there)."""
        if self.parent is not None and os.getppid() != self.parent:
            return f"its parent (PID {self.parent}) exited"
        for pid in self.pids:
            if not _exists(pid):
                return f"PID {pid} exited"
        for path in self.paths:
            if not os.path.exists(path):
                return f"{path} was removed"
        return None

    def _wait(self, poller: select.poll | None) -> str | None:
        if poller is None:
            time.sleep(self.poll_s)
            return None
        for _fd, events in poller.poll(self.poll_s * 1000):
            if events & (select.POLLHUP | select.POLLERR):
                return "its input was closed"
            if events & select.POLLNVAL:
                poller.unregister(0)
        return None

    def _run(self) -> None:
        poller: select.poll | None = None
        if self.stdin:
            poller = select.poll()
            poller.register(0, 0)  # no events asked: hangup and errors are always reported
        while True:
            reason = self._wait(poller) or self.check()
            if reason is not None:
                break
        self.gone = reason
        threading.Thread(target=self._stop, args=(reason,), daemon=True).start()
        time.sleep(self.exit_after_s)
        os._exit(self.exit_code)

    def _stop(self, reason: str) -> None:
        with contextlib.suppress(Exception):
            self.on_gone(reason)
