"""Injecting the agent into a Python that is already running (``attach`` and ``record --pid``).

Which Python the target runs is read, never asked (``collectors.pyversion``: /proc/PID/maps and
the ELF files of its executable and libpython): sofa-top often runs as root and never executes
anything of a target's. A process that is not a CPython 3.11+ is recorded from outside.

How: for CPython 3.14+, ``sys.remote_exec(pid, script)`` (PEP 768), called from sofa-top's own
interpreter (``sys.executable``), which must be of the target's major.minor. For
CPython 3.11-3.13 (the agent needs 3.11+), ``hypno`` (built on ``pyinjector``, which wraps the
maintained kubo/injector ptrace library; no gdb): it makes one thread of the target
``dlopen`` a small library whose constructor runs one line of Python under the GIL.

Which thread is hijacked matters: one that runs C code while holding the GIL (say, inside
CPython's allocator) must not be made to run Python there. So the injector picks a thread that
sits in a blocking system call which takes no user-space lock (sleep, poll, read, ...: it has
released the GIL, and it is not inside malloc), the main thread first; then one blocked on a
futex (a lock, or waiting for the GIL); only when, over ``_PICK_S``, no thread of the target
ever blocks (one thread spinning in pure Python) is the main thread taken where it runs
(``choose_thread``). That line runs the bootstrap (``sofa_top/agent/inject/attach.py``) by
file path, binding no name in the target's ``__main__``: it checks the attach token's deadline,
imports ``sofa_top.agent`` from sofa-top's own install without touching ``sys.path`` (right
there, while the call holds the GIL: in a thread of its own next to a thread that runs pure
Python, each of the imports' file reads waited 5 ms for the GIL to come back, 30 s in all) and
starts the agent in a thread of its own, which connects back. The injector runs in a helper
process of its own session: the wait for the target is bounded here (``timeout_s``) but the
helper, which is the target's ptrace tracer until the library call returns, is never killed,
so neither a give-up nor sofa-top being SIGKILLed can leave the target mid-call.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sofa_top.agent.launch_env import INJECT_DIR
from sofa_top.collectors import handoff
from sofa_top.collectors.agent import AgentServer, Handshake
from sofa_top.collectors.pyversion import NotTold, TargetPython, identify

BOOTSTRAP = INJECT_DIR / "attach.py"
DEFAULT_TIMEOUT_S = 5.0
_UNTRACED_POLL_S = 0.01  # a py-spy dump holds a thread for milliseconds
_CAP_SYS_PTRACE = 19  # linux/capability.h
SUPPORTED = ((3, 11), (3, 13))  # through hypno; 3.14+ through sys.remote_exec
InjectStatus = Literal[
    "injected",  # the agent said hello with our token
    "disabled",  # --no-inject
    "not-python",
    "unsupported",  # a Python the agent does not run in (PyPy, CPython < 3.11)
    "no-injector",  # hypno is not installed
    "denied",  # ptrace (or /proc) denied
    "exited",  # the target went away
    "timeout",  # the payload did not run within the bound (GIL held, stopped)
    "refused",  # the target already runs a sofa-top agent
    "traced",  # another tracer (a debugger, strace, py-spy dump) held it past the bound
    "failed",  # anything else the injector reported
]


@dataclass(frozen=True, slots=True)
class InjectResult:
    """What an injection attempt did; ``handshake`` is set only when ``status == "injected"``."""

    status: InjectStatus
    reason: str  # one line for people
    python: str | None = None  # "cpython 3.11" when known
    injector_s: float | None = None  # how long the injector held the target
    handshake: Handshake | None = None


def target_python(pid: int) -> TargetPython | NotTold:
    """The target's implementation and version, read from /proc and its files
    (``collectors.pyversion``): nothing of the target's is ever executed."""
    return identify(pid)


def unsupported_reason(py: TargetPython) -> str | None:
    """Why the agent cannot be injected into ``py``, or None when it can."""
    if py.implementation != "cpython":
        return f"{py} is not CPython: the agent is injected into CPython 3.11+ only"
    if py.version < SUPPORTED[0]:
        return f"{py} is older than the agent supports (CPython 3.11+)"
    return None


def agent_uids(pid: int) -> set[int]:
    """Whose agents sofa-top accepts for target ``pid``: its own uid, root and the target's."""
    uids = {os.getuid(), 0}
    with contextlib.suppress(OSError):
        uids.add(os.stat(f"/proc/{pid}").st_uid)
    return uids


def injector_available() -> str | None:
    """None when the 3.11-3.13 injector (hypno) can be imported, else why not."""
    try:
        import hypno  # noqa: F401
    except ImportError as e:
        return f"hypno is not installed ({e}): pip install hypno"
    return None


def payload(
    socket_path: Path, token: str, deadline: float, settings: str, bootstrap: Path = BOOTSTRAP
) -> str:
    """What the target runs: the bootstrap by path, which imports the agent right there (the
    call holds the GIL) and starts it in a thread of its own; nothing bound in ``__main__``."""
    args = {"socket": str(socket_path), "token": token, "deadline": deadline, "settings": settings}
    src = (
        "try:\n"
        " with open(p,'rb') as f: c=compile(f.read(),p,'exec')\n"
        " exec(c,{'__name__':'__sofa_top_attach__','__file__':p,'ARGS':a})\n"
        "except BaseException:\n"
        " pass\n"
    )
    scope = {"p": str(bootstrap), "a": args}
    return f"exec({src!r},{scope!r})"


_PICK_S = 1.0  # how long to look for a blocked thread before taking the running main thread
_PICK_EVERY_S = 0.01
# blocking system calls that hold no user-space lock (x86_64, aarch64); futex ranks second
_SAFE_SYSCALLS = {
    "x86_64": {0, 7, 23, 34, 35, 43, 45, 47, 61, 230, 232, 247, 270, 271, 281, 288},
    "aarch64": {22, 63, 72, 73, 95, 101, 115, 202, 207, 212, 242, 260},
}
_FUTEX = {"x86_64": 202, "aarch64": 98}


def thread_rank(pid: int, tid: int, machine: str) -> int | None:
    """0: blocked in a safe system call, 1: on a futex, 2: anything else; None: unreadable."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        if state not in (b"S", b"D"):
            # running: reading its syscall file would make the kernel wait until the thread
            # is off the CPU, which a busy target pays for at every poll
            return 2
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            fields = f.read().split()
    except (OSError, IndexError):
        return None
    if not fields or not fields[0].lstrip("-").isdigit():
        return 2  # "running"
    nr = int(fields[0])
    if nr in _SAFE_SYSCALLS.get(machine, set()):
        return 0
    return 1 if nr == _FUTEX.get(machine) else 2


def choose_thread(pid: int, pick_s: float = _PICK_S) -> tuple[int, str]:
    """The thread to hijack (see the module docstring) and, for people, why that one."""
    machine = os.uname().machine
    deadline = time.monotonic() + pick_s
    best: tuple[int, int] | None = None
    while True:
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            return pid, "its threads cannot be listed"
        for tid in [pid] + [t for t in tids if t != pid]:  # the main thread first
            rank = thread_rank(pid, tid, machine)
            if rank is not None and rank < 2 and (best is None or rank < best[0]):
                best = (rank, tid)
        if best is not None and (best[0] == 0 or time.monotonic() > deadline):
            rank, tid = best
            where = "the main thread" if tid == pid else f"thread {tid}"
            return tid, f"{where}, blocked in {'a system call' if rank == 0 else 'a lock'}"
        if time.monotonic() > deadline:
            return pid, "the main thread while it ran (no thread ever blocked)"
        time.sleep(_PICK_EVERY_S)


_HELPER = """
import json, sys, time
pid = int(sys.argv[1])
try:
    from hypno import inject_py
    code = sys.stdin.buffer.read()
    t0 = time.perf_counter()
    inject_py(pid, code)
    r = {'ok': True}
except Exception as e:
    r = {'ok': False, 'error': f'{type(e).__name__}: {e}', 'code': getattr(e, 'ret_val', None)}
r['s'] = time.perf_counter() - t0 if 't0' in globals() else None
print(json.dumps(r), flush=True)
"""


def remote_exec_available(py: TargetPython) -> str | None:
    """None when sofa-top's own interpreter can ``sys.remote_exec`` into ``py`` (a CPython
    3.14+ of its own major.minor: PEP 768 requires it), else why not and what would work."""
    own = sys.version_info[:2]
    if sys.implementation.name == "cpython" and own == py.version:
        return None
    mine = f"{sys.implementation.name} {own[0]}.{own[1]}"
    return (
        f"{py} is injected with sys.remote_exec, from a Python of the same version, and "
        f"sofa-top runs on {mine}: install sofa-top in a Python {py.version[0]}."
        f"{py.version[1]} to attach with the agent"
    )


def _helper_cmd(pid: int, tid: int, py: TargetPython, script: Path) -> list[str]:
    if py.version >= (3, 14):
        # the interpreter runs it at its next safe point: no thread needs choosing. Run by
        # sofa-top's own interpreter (remote_exec_available checked its version): never by
        # the target's executable, which may be anything
        run = f"import sys; sys.remote_exec({pid}, {str(script)!r})"
        return [sys.executable, "-I", "-S", "-c", run]
    # the payload comes on stdin: a file in a directory the target owns could be anything
    return [sys.executable, "-I", "-c", _HELPER, str(tid)]


_PTRACE_FIX = (
    "run sofa-top as root, or as the target's owner with kernel.yama.ptrace_scope=0 "
    "(--cap-add SYS_PTRACE in a container)"
)


def _classify(error: str, code: object, pid: int) -> tuple[InjectStatus, str]:
    low = error.lower()
    if code == -8 or "permission" in low or "operation not permitted" in low:
        return "denied", f"ptrace denied for PID {pid}: {_PTRACE_FIX}"
    if not os.path.exists(f"/proc/{pid}") or "no such process" in low:
        return "exited", f"PID {pid} exited during injection"
    return "failed", f"the injector failed: {error.splitlines()[0] if error else 'no reason'}"


def _bootstrap_for(pid: int, socket_dir: Path) -> Path:
    """The bootstrap the target runs: sofa-top's own, or, for a target of another uid (sofa-top
    as root), that of a copy of the agent in the per-attach directory the target owns: it may
    not read sofa-top's install (a venv under root's 0700 home, say). The agent is stdlib only
    and self-contained, so the copy is all it needs; it goes with the directory. Written
    through descriptors (``collectors.handoff``): the target owns that directory."""
    try:
        foreign = os.stat(f"/proc/{pid}").st_uid != os.geteuid()
    except OSError:
        foreign = False
    if not foreign:
        return BOOTSTRAP
    agent_dir = INJECT_DIR.parent
    try:
        top = handoff.open_dir(socket_dir)
        try:
            inner = handoff.make_dirs(top, "agent", "sofa_top")
            try:
                handoff.copy_tree(agent_dir, inner, agent_dir.name)
            finally:
                os.close(inner)
        finally:
            os.close(top)
    except OSError:
        return BOOTSTRAP  # the target may still read the install itself
    return socket_dir / "agent" / "sofa_top" / agent_dir.name / INJECT_DIR.name / BOOTSTRAP.name


def _write_payload(socket_dir: Path, text: str) -> Path:
    """The payload file the target (maybe another uid, which owns the directory) reads.
    Raises OSError."""
    top = handoff.open_dir(socket_dir)
    try:
        handoff.write_new(top, "payload.py", text.encode())
    finally:
        os.close(top)
    return socket_dir / "payload.py"


def inject(
    pid: int,
    server: AgentServer,
    settings: str = "{}",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> InjectResult:
    """Inject the agent into ``pid`` and wait (at most ``timeout_s``) for it to say hello on
    ``server``. Never raises for the target's sake: every outcome is an ``InjectResult``."""
    py = target_python(pid)
    if isinstance(py, NotTold):
        if py.kind == "denied":
            return InjectResult("denied", f"cannot inject the agent: {py.reason}; {_PTRACE_FIX}")
        if py.kind == "not-python":
            return InjectResult("not-python", f"{py.reason}: no agent to inject")
        return InjectResult(py.kind, f"cannot inject the agent: {py.reason}")
    why = unsupported_reason(py)
    if why is not None:
        return InjectResult("unsupported", why, str(py))
    missing = injector_available() if py.version < (3, 14) else remote_exec_available(py)
    if missing is not None:
        return InjectResult("no-injector", missing, str(py))
    tid, where = (pid, "") if py.version >= (3, 14) else choose_thread(pid)
    token = secrets.token_hex(16)
    deadline = time.time() + timeout_s
    bootstrap = _bootstrap_for(pid, server.socket_dir)
    try:
        text = payload(server.socket_path, token, deadline, settings, bootstrap)
        script = _write_payload(server.socket_dir, text)
    except OSError as e:
        return InjectResult("failed", f"cannot write the agent's payload: {e}", str(py))
    tracer = 0
    while True:
        # one tracer at a time: a py-spy dump, strace or debugger holding the thread makes
        # the injector's attach fail as if denied; wait for it to let go, then try again
        tracer = _wait_untraced(pid, tid, deadline) or tracer
        if tracer and tracer_of(pid, tid):  # still held at the deadline
            return InjectResult("traced", _traced_reason(pid, tracer, timeout_s), str(py))
        ran = _run_helper(pid, tid, py, (script, text), deadline, timeout_s)
        if isinstance(ran, float) or ran.status != "denied" or time.time() >= deadline:
            break
        tracer = tracer_of(pid, tid) or tracer
        if not (tracer or has_cap_sys_ptrace()):
            break  # a rule (ptrace_scope, another uid, non-dumpable), not a moment
    if isinstance(ran, InjectResult):
        if ran.status == "denied" and tracer:
            return InjectResult("traced", _traced_reason(pid, tracer, timeout_s), str(py))
        return ran
    injector_s = ran
    hs = server.accept_agent(token, deadline, agent_uids(pid))
    if isinstance(hs, str):
        if not os.path.exists(f"/proc/{pid}"):
            return InjectResult("exited", f"PID {pid} exited during injection", str(py), injector_s)
        return InjectResult("timeout", hs, str(py), injector_s)
    if hs.refused:
        reason = f"{hs.refused}: a second concurrent attach gets no agent"
        return InjectResult("refused", reason, str(py), injector_s)
    how = f" through {where}" if where else ""
    return InjectResult("injected", f"agent injected ({py}){how}", str(py), injector_s, hs)


def _run_helper(
    pid: int,
    tid: int,
    py: TargetPython,
    payload: tuple[Path, str],
    deadline: float,
    timeout_s: float,
) -> InjectResult | float:
    """One run of the injector: what went wrong, or how long it held the target."""
    t0 = time.monotonic()
    try:
        helper = subprocess.Popen(
            _helper_cmd(pid, tid, py, payload[0]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,
            # its own session: Ctrl-C or sofa-top's death never kills the target's tracer
            start_new_session=True,
        )
    except OSError as e:
        return InjectResult("failed", f"cannot start the injector: {e}", str(py))
    try:
        code = b"" if py.version >= (3, 14) else payload[1].encode()
        out, err = helper.communicate(code, timeout=max(deadline - time.time(), 0.1))
    except subprocess.TimeoutExpired:
        # still inside the target: leave the helper to finish; the late payload does nothing
        return InjectResult(
            "timeout",
            f"PID {pid} did not run the agent within {timeout_s:.0f} s (it holds the GIL in a "
            "long C call, or is stopped); gave up, the job is untouched",
            str(py),
        )
    injector_s = time.monotonic() - t0
    if py.version < (3, 14):
        try:
            r = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            r = {"ok": False, "error": err.decode("utf-8", "replace").strip()[-300:]}
        injector_s = float(r["s"]) if isinstance(r.get("s"), float) else injector_s
        if not r.get("ok"):
            status, reason = _classify(str(r.get("error", "")), r.get("code"), pid)
            return InjectResult(status, reason, str(py), injector_s)
    elif helper.returncode != 0:
        status, reason = _classify(err.decode("utf-8", "replace"), None, pid)
        return InjectResult(status, reason, str(py), injector_s)
    return injector_s


def tracer_of(pid: int, tid: int | None = None) -> int:
    """The PID that ptrace-traces thread ``tid`` of ``pid`` (a debugger, strace, a py-spy dump
    while it reads); 0: none, or unreadable."""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/status") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _wait_untraced(pid: int, tid: int, deadline: float) -> int:
    """Wait (until ``deadline``) for another tracer to let go of ``tid``; the one seen, or 0."""
    seen = 0
    while (now := tracer_of(pid, tid)) and time.time() < deadline:
        seen = now
        time.sleep(_UNTRACED_POLL_S)
    return seen


def has_cap_sys_ptrace() -> bool:
    """Whether this process holds CAP_SYS_PTRACE (root, unless a container dropped it): it may
    trace any process, so a denial is another tracer's doing (over in a moment: a py-spy
    dump), not a rule."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _traced_reason(pid: int, tracer: int, timeout_s: float) -> str:
    try:
        with open(f"/proc/{tracer}/comm") as f:
            name = f" ({f.read().strip()})"
    except OSError:
        name = ""
    return (
        f"PID {pid} is traced by PID {tracer}{name}, and a process has one tracer at a time "
        f"(a debugger, strace, a profiler); it held on for {timeout_s:.0f} s: detach it, then "
        "attach again"
    )
