"""Finding the Python processes of this machine: the one rule for "is this Python", and the
scan the home screen lists (busiest first, with GPU memory where NVML says)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from sofa_top.collectors.pyversion import TargetPython, identify
from sofa_top.datamodel.units import Pid

# python, python3.11, pythonw, python3-dbg, ipython, pypy3 ...
_PYTHON = re.compile(r"^(?:i?python|pypy)\d*(?:\.\d+)*[a-z]*(?:-dbg)?$", re.IGNORECASE)
FIRST_SAMPLE_S = 0.5  # CPU % needs two readings; the first scan waits this long between them


def is_python(name: str, cmdline: Sequence[str] = (), exe: str = "") -> bool:
    """True for a Python interpreter, by process name, executable or argv[0]."""
    exe = exe.removesuffix(" (deleted)")
    candidates = (name, os.path.basename(exe), os.path.basename(cmdline[0]) if cmdline else "")
    return any(_PYTHON.match(c) for c in candidates if c)


def is_python_process(pid: Pid) -> bool | None:
    """Whether ``pid`` runs a Python interpreter (py-spy can read its stacks), read from its
    maps and ELF files, never by running anything (``collectors.pyversion``: a program called
    ``python3`` is not one for its name); None when that cannot be told (gone, or permission
    denied)."""
    found = identify(pid)
    if isinstance(found, TargetPython):
        return True
    if found.kind == "unsupported":
        return True  # PyPy, an older CPython: Python, though no agent runs in it
    return False if found.kind == "not-python" else None


@dataclass(frozen=True, slots=True)
class PyProc:
    """One Python process as the picker lists it."""

    pid: int
    name: str
    cmdline: tuple[str, ...]
    cpu_percent: float | None  # None until two readings exist
    rss: int | None
    gpu_mem: int | None = None  # None: unknown (no NVIDIA GPU, or not on one)
    user: str = ""


class GpuMemory:
    """GPU memory per pid from NVML; gives up for good the first time NVML is unavailable."""

    def __init__(self) -> None:
        self._backend: object | None = None
        self._failed = False

    def __call__(self) -> dict[int, int]:
        if self._failed:
            return {}
        try:
            from sofa_top.collectors.gpu import PynvmlBackend

            backend = self._backend
            if not isinstance(backend, PynvmlBackend):
                backend = PynvmlBackend()
                backend.init()
                self._backend = backend
            used: dict[int, int] = {}
            for index in range(backend.device_count()):
                handle = backend.handle(index)
                for proc in [
                    *backend.compute_processes(handle),
                    *backend.graphics_processes(handle),
                ]:
                    if proc.used_memory is not None:
                        used[proc.pid] = used.get(proc.pid, 0) + proc.used_memory
            return used
        except Exception:  # no pynvml, no driver, no GPU: the column just says "-"
            self._failed = True
            return {}


class PythonProcessScanner:
    """Lists the Python processes of this machine, busiest first (call it off the UI thread)."""

    def __init__(self, *, gpu: Callable[[], dict[int, int]] | None = None) -> None:
        # cpu_percent() measures since the previous call on the same Process object: keep them.
        self._procs: dict[int, psutil.Process] = {}
        self._gpu = gpu if gpu is not None else GpuMemory()
        self._own = os.getpid()

    def __call__(self) -> list[PyProc]:
        found: dict[int, tuple[psutil.Process, str, tuple[str, ...], str]] = {}
        for proc in psutil.process_iter(["name", "cmdline", "exe", "username"]):
            if proc.pid == self._own:
                continue
            info = proc.info
            name = str(info.get("name") or "")
            cmdline = tuple(str(a) for a in info.get("cmdline") or ())
            if not is_python(name, cmdline, str(info.get("exe") or "")):
                continue
            cached = self._procs.get(proc.pid)
            # Process equality includes the start time: a reused pid is a new process.
            keep = cached if cached is not None and cached == proc else proc
            found[proc.pid] = (keep, name, cmdline, str(info.get("username") or ""))
        fresh = [p for p, *_ in found.values() if p.pid not in self._procs]
        for proc in fresh:
            with contextlib.suppress(psutil.Error):
                proc.cpu_percent(None)
        if fresh and not self._procs:
            time.sleep(FIRST_SAMPLE_S)  # the very first scan: give CPU % something to measure
            fresh = []
        self._procs = {pid: p for pid, (p, *_) in found.items()}
        gpu = self._gpu()
        new = {p.pid for p in fresh}
        rows: list[PyProc] = []
        for pid, (proc, name, cmdline, user) in found.items():
            try:
                cpu = None if pid in new else proc.cpu_percent(None)
                rss = proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            except psutil.Error:
                cpu, rss = None, None
            rows.append(PyProc(pid, name, cmdline, cpu, rss, gpu.get(pid), user))
        return sort_processes(rows)


def sort_processes(rows: Sequence[PyProc]) -> list[PyProc]:
    """Busiest first; unknown CPU after known, then by memory."""
    return sorted(
        rows,
        key=lambda p: (p.cpu_percent is None, -(p.cpu_percent or 0.0), -(p.rss or 0), p.pid),
    )


# -- a copy of a running job (compare --like PID, the optimizer panel of an attached session) --

# what sofa-top itself put into a job it launched: never part of a copy
_OURS = ("SOFA_TOP_SOCKET", "SOFA_TOP_AGENT_SETTINGS")


@dataclass(frozen=True, slots=True)
class JobCopy:
    """What it takes to start the same command again: argv, working directory, environment."""

    pid: int
    cmd: tuple[str, ...]
    cwd: str
    env: dict[str, str]

    def describe(self) -> str:
        """One paragraph for the confirmation: what runs, where, and what it may touch."""
        return (
            f"This re-runs a copy of PID {self.pid}'s command ({' '.join(self.cmd)[:200]}) in "
            f"{self.cwd} with its environment ({len(self.env)} variables). The running job is "
            "not touched, but the copy shares this machine with it (CPU, memory, GPU) and may "
            "write where it writes (checkpoints, logs, outputs)."
        )


def job_copy(pid: Pid) -> JobCopy:
    """Read PID's command line, working directory and environment from /proc; raises UserError
    with one line when any of them cannot be read."""
    from sofa_top.datamodel.errors import UserError

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "surrogateescape") for a in f.read().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = [v.decode("utf-8", "surrogateescape") for v in f.read().split(b"\0") if v]
    except FileNotFoundError:
        raise UserError(f"no such process: PID {pid}") from None
    except PermissionError:
        raise UserError(
            f"permission denied reading PID {pid}'s command, directory or environment: "
            "run sofa-top as its owner or with sudo"
        ) from None
    except OSError as e:
        raise UserError(f"cannot read PID {pid}: {e.strerror or e}") from None
    if not argv:
        raise UserError(f"PID {pid} has no command line (a kernel thread or a zombie)")
    _same_owner(pid)
    env = dict(p.split("=", 1) for p in pairs if "=" in p)
    for key in _OURS:
        env.pop(key, None)
    inject_dir = os.path.join("sofa_top", "agent", "inject")
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if not p.endswith(inject_dir)]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    return JobCopy(pid, tuple(argv), cwd, env)


def _same_owner(pid: Pid) -> None:
    """A copy runs as sofa-top's user: the job of another (sofa-top as root) would have its
    command, with its environment's PATH, LD_PRELOAD and venv, run as root. Raises UserError."""
    from sofa_top.datamodel.errors import UserError

    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        raise UserError(f"no such process: PID {pid}") from None
    me = os.geteuid()
    if owner != me:
        name = _user_name(owner)
        raise UserError(
            f"PID {pid} is {name}'s job and sofa-top runs as {_user_name(me)}: its copy would "
            f"run {name}'s command as {_user_name(me)}; run it as {name} "
            f"(sudo -u {name} sofa-top compare --like {pid} ...)"
        )


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def proc_text(value: object) -> str:
    """A name or argument from /proc as valid Unicode: psutil decodes non-UTF-8 bytes (a
    command line, a ``comm`` set with prctl) to lone surrogates, which SQLite, JSON consumers
    and the terminal all refuse; they become U+FFFD here, once, at the source."""
    text = str(value)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
