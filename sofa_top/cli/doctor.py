"""``sofa-top doctor``: what works on this machine, and how to fix what does not.

Exit semantics: doctor succeeds (``ok=True``, exit 0) when sofa-top can attach, i.e. when
process collection works; that is the only *required* check. Everything else degrades a session
rather than preventing it: without py-spy or ptrace permission there are no Python stacks (and
no input-pipeline verdict from them) but CPU/memory/GPU still show, so those checks are listed as
failing, with their fix, without failing doctor. "No NVIDIA GPU" and "torch/tensorflow not
installed" are information, not failures.

Slow probes (framework imports, py-spy, NVML) run concurrently and under a timeout, in
subprocesses or threads, so doctor stays fast and cannot hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

from sofa_top.collectors import children
from sofa_top.collectors.gpu import probe_gpus
from sofa_top.collectors.process import ProcessCollector
from sofa_top.collectors.stacks import find_pyspy
from sofa_top.datamodel.samples import GpuSample, ProcessSample
from sofa_top.recording import paths

Level = Literal["ok", "info", "warn", "fail"]

MIN_COLUMNS, MIN_LINES = 80, 24


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report. ``info`` and ``warn`` are fine; ``fail`` needs ``fix``."""

    name: str
    level: Level
    detail: str
    fix: str = ""
    required: bool = False  # a failing required check means sofa-top cannot attach

    @property
    def ok(self) -> bool:
        return self.level != "fail"


def overall_ok(checks: list[Check]) -> bool:
    """True when every required check passes (see the module docstring)."""
    return all(c.ok for c in checks if c.required)


# --------------------------------------------------------------------------- probe process


_PROBE_CODE = "import time; print('ready', flush=True); time.sleep(60)"


def _start_probe(timeout: float) -> subprocess.Popen[bytes] | None:
    """A short-lived Python child to attach to: the real test of what attach can do."""
    p = subprocess.Popen(
        [sys.executable, "-c", _PROBE_CODE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    children.guard(p.pid)  # it sleeps 60 s: not past doctor, even a killed one
    assert p.stdout is not None
    # Wait until the interpreter is up: py-spy fails on a process that has not mapped it yet.
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    if not ready or not p.stdout.readline().startswith(b"ready"):
        _stop_probe(p)
        return None
    return p


def _stop_probe(p: subprocess.Popen[bytes]) -> None:
    p.kill()
    p.wait()
    children.release(p.pid)
    if p.stdout is not None:
        p.stdout.close()


# --------------------------------------------------------------------------- checks


def check_process_stats(pid: int) -> Check:
    """Process collection (required): CPU, memory, I/O and threads of a real process."""
    name = "process stats"
    collector = ProcessCollector(pid)
    collector.tick()
    time.sleep(0.05)
    samples = [s for s in collector.tick() if isinstance(s, ProcessSample)]
    procs = samples[0].procs if samples else ()
    if not procs or not procs[0].alive or procs[0].cpu_percent is None or procs[0].rss is None:
        why = samples[0].error if samples and samples[0].error else "no reading"
        return Check(
            name,
            "fail",
            f"cannot read process statistics ({why})",
            fix="sofa-top needs a readable /proc (Linux) and psutil; check mount options "
            "such as hidepid",
            required=True,
        )
    detail = f"psutil {psutil.__version__} reads CPU, memory, threads"
    if procs[0].read_bytes is None:
        return Check(name, "warn", detail + "; I/O counters unreadable", required=True)
    return Check(name, "ok", detail + " and I/O", required=True)


def ptrace_status() -> tuple[int | None, bool, bool]:
    """(Yama ptrace_scope or None where Yama is absent, running as root, has CAP_SYS_PTRACE)."""
    from sofa_top.collectors.inject import has_cap_sys_ptrace

    scope: int | None = None
    with contextlib.suppress(OSError, ValueError):
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    return scope, os.geteuid() == 0, has_cap_sys_ptrace()


def _ptrace_context() -> str:
    scope, root, cap = ptrace_status()
    parts = ["ptrace_scope=" + ("absent (no Yama)" if scope is None else str(scope))]
    parts.append("root" if root else "not root")
    parts.append("CAP_SYS_PTRACE" if cap else "no CAP_SYS_PTRACE")
    return ", ".join(parts)


def _ptrace_fix() -> str:
    scope, _root, _cap = ptrace_status()
    if scope == 3:
        return (
            "ptrace_scope=3 forbids attaching until reboot; set kernel.yama.ptrace_scope=0 "
            "in /etc/sysctl.d and reboot"
        )
    fixes = ["run sofa-top with sudo"]
    if scope is not None and scope >= 1:
        fixes.append("or: sudo sysctl kernel.yama.ptrace_scope=0")
    fixes.append("in Docker: docker run --cap-add SYS_PTRACE")
    return "; ".join(fixes)


def check_py_spy(py_spy: str | None, timeout: float = 10.0) -> Check:
    """py-spy is installed and runs."""
    if py_spy is None:
        return Check(
            "py-spy",
            "fail",
            f"not found next to {sys.executable} nor on PATH; no Python stacks",
            fix=f"{sys.executable} -m pip install py-spy",
        )
    try:
        out = subprocess.run(
            [py_spy, "--version"], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("py-spy", "fail", f"{py_spy} does not run: {exc}", fix="reinstall py-spy")
    version = out.stdout.strip() or out.stderr.strip()
    return Check("py-spy", "ok", f"{py_spy} ({version})")


def check_stacks(py_spy: str | None, pid: int | None, timeout: float = 10.0) -> Check:
    """Can py-spy read the stacks of ``pid`` (a Python process)? Tried for real."""
    name = "python stacks"
    context = _ptrace_context()
    if py_spy is None:
        return Check(name, "fail", "unavailable: py-spy not installed", fix="install py-spy")
    if pid is None:
        return Check(name, "fail", "could not start a Python probe process", fix="")
    try:
        out = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Check(name, "fail", f"py-spy dump hung for {timeout:g}s ({context})", fix="")
    except OSError as exc:
        return Check(name, "fail", f"py-spy does not run: {exc}", fix="reinstall py-spy")
    if out.returncode == 0 and "Thread" in out.stdout:
        return Check(name, "ok", f"py-spy can read Python stacks ({context})")
    err = next((ln.strip() for ln in out.stderr.splitlines() if ln.strip()), "no output")
    denied = any(w in out.stderr.lower() for w in ("permission", "not permitted", "ptrace"))
    if denied:
        return Check(name, "fail", f"ptrace denied: {err} ({context})", fix=_ptrace_fix())
    return Check(name, "fail", f"py-spy dump failed: {err} ({context})", fix="")


def check_injection(pid: int | None, timeout: float = 10.0) -> Check:
    """Agent injection (attach): really inject into the probe Python, then detach."""
    from sofa_top.collectors.agent import AgentServer
    from sofa_top.collectors.inject import inject, injector_available

    name = "agent injection"
    if pid is None:
        return Check(name, "fail", "could not start a Python probe process", fix="")
    missing = injector_available()
    if missing is not None:
        return Check(name, "warn", missing, fix="pip install hypno (for CPython 3.11-3.13)")
    try:
        with AgentServer() as server:
            r = inject(pid, server, timeout_s=timeout)
            if r.handshake is not None:
                r.handshake.sock.close()  # the agent detaches when its socket closes
    except Exception as e:  # doctor reports, it never crashes
        return Check(name, "fail", f"injection failed: {e!r}", fix="")
    if r.status == "injected":
        took = f" in {r.injector_s * 1e3:.0f} ms" if r.injector_s is not None else ""
        return Check(
            name,
            "ok",
            f"attach injects the agent ({r.python}{took}; CPython 3.11-3.13 through hypno, "
            "3.14+ through sys.remote_exec)",
        )
    fix = _ptrace_fix() if r.status == "denied" else ""
    return Check(name, "fail", f"{r.reason}; attach records from outside only", fix=fix)


def check_gpu(timeout: float = 10.0) -> Check:
    """NVML and the GPUs it sees; no NVIDIA GPU is information, not a failure."""
    box: list[GpuSample | BaseException] = []

    def probe() -> None:
        try:
            box.append(probe_gpus())
        except BaseException as exc:  # reported below; a thread must not die silently
            box.append(exc)

    # A wedged driver can block nvmlInit for a long time: give up rather than hang doctor.
    t = threading.Thread(target=probe, daemon=True, name="doctor-nvml")
    t.start()
    t.join(timeout)
    if not box:
        return Check("NVIDIA GPU", "fail", f"NVML did not answer within {timeout:g}s", fix="")
    s = box[0]
    if isinstance(s, BaseException):
        return Check("NVIDIA GPU", "fail", f"NVML probe crashed: {s!r}")
    if s.status in ("no-gpu", "no-driver"):
        return Check("NVIDIA GPU", "info", s.message)
    if s.status == "error":
        return Check("NVIDIA GPU", "fail", s.message, fix="check the driver with nvidia-smi")
    gib = 1024**3
    gpus = ", ".join(
        f"{d.index}: {d.name}"
        + (f" ({d.mem_total / gib:.0f} GiB)" if d.mem_total else "")
        + (f" MIG on, {len(d.mig_instances)} instance(s)" if d.mig else "")
        for d in s.devices
    )
    driver = f", driver {s.driver}" if s.driver else ""
    return Check("NVIDIA GPU", "ok", f"{len(s.devices)} GPU(s){driver}: {gpus}")


_IMPORT_CODE = """
import importlib, json, sys
name = sys.argv[1]
try:
    m = importlib.import_module(name)
except ModuleNotFoundError as e:
    if e.name == name:
        print(json.dumps({"missing": True}))
        sys.exit(0)
    raise
info = {"version": str(getattr(m, "__version__", "?"))}
if name == "torch":
    info["cuda"] = str(m.version.cuda)
    info["gpu"] = bool(m.cuda.is_available())
    if info["gpu"]:  # what the agent's torch-cuda hook needs: bf16, CUDA profiler windows
        info["device"] = str(m.cuda.get_device_name(0))
        info["bf16"] = bool(m.cuda.is_bf16_supported())
        import torch.profiler as tp
        info["profiler"] = tp.ProfilerActivity.CUDA in tp.supported_activities()
elif name == "tensorflow":
    info["gpu"] = bool(m.config.list_physical_devices("GPU"))
print(json.dumps(info))
"""


def _start_import(module: str) -> subprocess.Popen[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    p = subprocess.Popen(
        [sys.executable, "-c", _IMPORT_CODE, module],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    children.guard(p.pid)
    return p


def _finish_import(module: str, p: subprocess.Popen[str], deadline: float, limit: float) -> Check:
    try:
        out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        children.release(p.pid)
        return Check(
            module, "warn", f"`import {module}` did not finish within {limit:g}s; not checked"
        )
    children.release(p.pid)
    if p.returncode != 0:
        last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "no output")
        return Check(
            module,
            "warn",
            f"installed but `import {module}` fails: {last.strip()}",
            fix=f"reinstall {module} in this environment ({sys.executable})",
        )
    try:
        info = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Check(module, "warn", f"unexpected output from importing {module}")
    if info.get("missing"):
        return Check(module, "info", "not installed in this environment")
    extra = ""
    if module == "torch":
        extra = (
            f", CUDA {info['cuda']}" if info.get("cuda") not in (None, "None") else ", CPU build"
        )
    if "gpu" in info:
        extra += ", sees a GPU" if info["gpu"] else ", no GPU visible"
    if info.get("device"):
        extra += f" ({info['device']}{', bf16' if info.get('bf16') else ', no bf16'})"
    if info.get("profiler") is False:
        extra += "; no CUDA profiler (CUPTI): GPU busy time unmeasured, NVML stands in"
    return Check(module, "ok", f"{info['version']}{extra}")


def check_import(module: str, timeout: float = 20.0) -> Check:
    """Whether ``module`` imports in this environment, in a subprocess, under a timeout."""
    return _finish_import(module, _start_import(module), time.monotonic() + timeout, timeout)


def check_terminal(
    size: os.terminal_size | None = None,
    env: Mapping[str, str] | None = None,
    isatty: bool | None = None,
) -> Check:
    """Terminal size and colour support (defaults: this process's stdout and environment)."""
    env = os.environ if env is None else env
    if isatty is None:
        isatty = sys.stdout.isatty()
    term = env.get("TERM", "")
    colorterm = env.get("COLORTERM", "")
    if colorterm in ("truecolor", "24bit"):
        colors = "truecolor"
    elif "256color" in term:
        colors = "256 colors"
    elif term in ("", "dumb"):
        colors = "no colors"
    else:
        colors = "basic colors"
    described = f"TERM={term or '(unset)'}" + (f", COLORTERM={colorterm}" if colorterm else "")
    if not isatty and size is None:
        return Check("terminal", "info", f"not a terminal (output redirected); {described}")
    size = size if size is not None else shutil.get_terminal_size()
    detail = f"{size.columns}x{size.lines}, {colors} ({described})"
    if size.columns < MIN_COLUMNS or size.lines < MIN_LINES:
        return Check(
            "terminal",
            "warn",
            f"{detail}: smaller than {MIN_COLUMNS}x{MIN_LINES}",
            fix=f"enlarge the window to at least {MIN_COLUMNS}x{MIN_LINES}",
        )
    if colors == "no colors":
        return Check(
            "terminal", "warn", detail, fix="set TERM (e.g. xterm-256color) to get colours"
        )
    return Check("terminal", "ok", detail)


def check_data_dir() -> Check:
    """The data directory exists (created if needed) and is writable."""
    d = paths.data_dir()
    try:
        paths.sessions_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=paths.sessions_dir(), prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "data dir",
            "fail",
            f"{d} is not writable: {exc.strerror or exc}",
            fix="set SOFA_TOP_DATA_DIR to a writable directory",
        )
    return Check("data dir", "ok", f"{d} (writable)")


def _stacks_then_injection(
    py_spy: str | None, pid: int | None, timeout: float
) -> tuple[Check, Check]:
    return check_stacks(py_spy, pid, timeout), check_injection(pid, 10.0)


# --------------------------------------------------------------------------- doctor


def run_doctor(
    timeout: float = 20.0,
    *,
    find_py_spy: Callable[[], str | None] = find_pyspy,
    frameworks: Sequence[str] = ("torch", "tensorflow"),
) -> tuple[list[Check], bool]:
    """Run every check; returns them in display order and whether sofa-top can attach."""
    deadline = time.monotonic() + timeout
    imports = {m: _start_import(m) for m in frameworks}
    probe = _start_probe(min(timeout, 10.0))
    try:
        py_spy = find_py_spy()
        with ThreadPoolExecutor(max_workers=4) as pool:
            gpu = pool.submit(check_gpu, min(timeout, 10.0))
            # one after the other: a process has one ptrace tracer at a time, so a py-spy dump
            # during the injection (or the reverse) is refused as if ptrace were denied
            traced = pool.submit(
                _stacks_then_injection, py_spy, probe.pid if probe else None, min(timeout, 10.0)
            )
            spy = pool.submit(check_py_spy, py_spy, min(timeout, 10.0))
            if probe is not None:
                process = check_process_stats(probe.pid)
            else:
                process = Check(
                    "process stats",
                    "fail",
                    f"could not start a probe process ({sys.executable})",
                    required=True,
                )
            stacks, injection = traced.result()
            checks = [process, spy.result(), stacks, injection, gpu.result()]
    finally:
        if probe is not None:
            _stop_probe(probe)
    checks += [_finish_import(m, p, deadline, timeout) for m, p in imports.items()]
    checks += [check_terminal(), check_data_dir()]
    return checks, overall_ok(checks)


_MARK: dict[Level, str] = {"ok": "✓", "info": "·", "warn": "!", "fail": "✗"}
_COLOR: dict[Level, str] = {"ok": "32", "info": "36", "warn": "33", "fail": "31"}


def render(checks: list[Check], ok: bool, *, color: bool = False) -> str:
    """The report as text: one line per check, its fix indented below, and the verdict."""
    width = max((len(c.name) for c in checks), default=0) + 2
    lines = ["sofa-top doctor"]
    for c in checks:
        mark = _MARK[c.level]
        if color:
            mark = f"\x1b[{_COLOR[c.level]}m{mark}\x1b[0m"
        lines.append(f"  {mark} {c.name.ljust(width)}{c.detail}")
        if c.fix and c.level in ("fail", "warn"):
            lines.append(f"    {' ' * width}fix: {c.fix}")
    failing = [c.name for c in checks if c.level == "fail"]
    if not ok:
        required = ", ".join(c.name for c in checks if c.required and not c.ok)
        lines.append(f"sofa-top cannot attach: {required} failed.")
    elif failing:
        lines.append(f"sofa-top can attach; limited until fixed: {', '.join(failing)}.")
    else:
        lines.append("sofa-top can attach; everything works.")
    return "\n".join(lines)


def main() -> int:
    """``sofa-top doctor``: print the report; exit 0 when sofa-top can attach, else 1."""
    checks, ok = run_doctor()
    color = (
        sys.stdout.isatty() and os.environ.get("TERM") != "dumb" and "NO_COLOR" not in os.environ
    )
    print(render(checks, ok, color=color))
    return 0 if ok else 1
