"""Resolving and validating the process to profile."""

from __future__ import annotations

import os

import psutil

from sofa_top.errors import UserError
from sofa_top.snapshot import TargetInfo


def resolve_pid(pid: int) -> TargetInfo:
    """Check that ``pid`` can be attached to; raise ``UserError`` with one clear line if not."""
    if pid <= 0:
        raise UserError(f"invalid PID {pid}: must be a positive number")
    if pid == os.getpid():
        raise UserError(f"PID {pid} is sofa-top itself")
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status = proc.status()
            name = proc.name()
            cmdline = tuple(proc.cmdline())
            proc.cpu_times()  # AccessDenied here means we cannot even read its CPU use
    except psutil.NoSuchProcess:
        raise UserError(f"no process with PID {pid}") from None
    except psutil.ZombieProcess:
        raise UserError(
            f"PID {pid} is a zombie (it exited; its parent has not reaped it)"
        ) from None
    except psutil.AccessDenied:
        raise UserError(
            f"permission denied reading PID {pid}: run sofa-top as the process's user or as root"
        ) from None
    if status == psutil.STATUS_ZOMBIE:
        raise UserError(f"PID {pid} is a zombie (it exited; its parent has not reaped it)")
    if not cmdline and _is_kernel_thread(pid):
        raise UserError(f"PID {pid} ({name}) is a kernel thread, not a program")
    return TargetInfo(pid=pid, name=name, cmdline=cmdline or (name,))


def _is_kernel_thread(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return bool(int(fields[6]) & 0x00200000)  # PF_KTHREAD in the flags field
    except (OSError, IndexError, ValueError):
        return False


def tree_pids(pid: int) -> set[int]:
    """The PID and all its live descendants (empty once it is gone)."""
    try:
        proc = psutil.Process(pid)
        return {pid, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return set()
