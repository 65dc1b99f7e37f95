"""sofa-top's watchdog: the one process that stops what a sofa-top process started when that
process dies without stopping it (SIGKILL, a crash). Standard library only, run by path as
``python -I -S watchdog.py PARENT_PID`` (``collectors.children`` starts it, once per process).

Its stdin is one end of a ``SOCK_SEQPACKET`` pair whose other end only the parent holds: each
message is ``+PID`` (guard this process and the group it leads) or ``-PID`` (it was reaped:
forget it). The end of the stream is the parent's death, whatever killed it: then every guarded
group gets SIGTERM, and SIGKILL what is left after ``GRACE_S``, and the watchdog exits.
PARENT_PID is only there for ``ps`` (and the tests) to tell whose watchdog this is. It forks
once at the start (the parent reaps the first process): the watchdog is nobody's child.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

GRACE_S = 5.0  # as a workload's SIGTERM grace (launch.TERMINATE_GRACE_S)
POLL_S = 0.05


def _signal(pid: int, sig: int) -> bool:
    """Signal the group ``pid`` leads, or ``pid`` alone when it leads none; whether anything
    was there to signal."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        pass
    except PermissionError:
        return True
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _alive(pid: int) -> bool:
    """Whether the group or process is still there (a zombie leader counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[-1].split()[:1] == [b"Z"]:
                return _signal(pid, 0) and _group_has_live(pid)
    except OSError:
        pass
    return _signal(pid, 0)


def _group_has_live(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pgid:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def _read(sock: socket.socket) -> set[int]:
    """The guarded PIDs when the parent is gone."""
    guarded: set[int] = set()
    while True:
        try:
            data = sock.recv(64)
        except InterruptedError:
            continue
        except OSError:
            return guarded
        if not data:
            return guarded
        try:
            pid = int(data[1:])
        except ValueError:
            continue
        if data[:1] == b"+":
            guarded.add(pid)
        elif data[:1] == b"-":
            guarded.discard(pid)


def main() -> int:
    """Wait for the parent's end, then stop what it left."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # the terminal's signals are the parent's to handle
    if os.fork() > 0:
        # Not a child of the parent's: whoever counts a sofa-top's children (its own clean-up
        # of a page's processes, a test's) finds only what sofa-top started for its work.
        os._exit(0)
    sock = socket.socket(fileno=sys.stdin.fileno())
    left = [pid for pid in _read(sock) if _signal(pid, signal.SIGTERM)]
    deadline = time.monotonic() + GRACE_S
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = [pid for pid in left if _alive(pid)]
    for pid in left:
        _signal(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
