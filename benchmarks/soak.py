"""Soak: sofa-top attached to a real workload for ``--minutes`` (default 30) at default rates.

The default path is the one a user runs and the heavier one: the live dashboard,
``sofa-top attach PID`` in a real terminal (tmux, 160x48). ``--headless`` soaks
``sofa-top record --pid PID`` instead. The workload is the bundled PyTorch demo (a CNN fed by
an input-bound DataLoader; ``--workload busy`` for a pure-Python loop where torch is missing).

Every ``--every`` seconds (default 60) it prints sofa-top's RSS and CPU (% of one core over the
interval, its own and its reaped py-spy children's), and at the end the verdict: ``flat`` when
the RSS after the first sixth of the run (5 minutes of 30) grows by at most 10% to the largest
later reading, else ``growing``; ``crashed`` if sofa-top died. Usage::

    python benchmarks/soak.py [--minutes 30] [--every 60] [--headless] [--workload torch|busy]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
GROWTH_LIMIT = 0.10


@dataclass
class Reading:
    t: float  # seconds since sofa-top started
    rss_mib: float
    own_cpu: float  # % of one core over the interval
    pyspy_cpu: float


def _workload(kind: str, seconds: float) -> list[str]:
    if kind == "torch":
        demo = ["-m", "sofa_top.demos.torch_input_bound"]
        return [sys.executable, *demo, "--seconds", str(seconds)]
    return [sys.executable, str(HERE.parent / "tests/workloads/busy_python.py"), str(seconds)]


def _find_sofa_top(pid: int, timeout: float = 30) -> psutil.Process:
    """The ``sofa-top ... PID`` process (started by tmux, so not our child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if any(c.endswith("sofa-top") for c in cmd[:2]) and str(pid) in cmd:
                return p
        time.sleep(0.2)
    raise SystemExit(f"sofa-top attached to PID {pid} did not start")


def _cpu(p: psutil.Process) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds."""
    t = p.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def _verdict(readings: list[Reading], minutes: float) -> str:
    baseline_t = minutes * 60 / 6
    base = [r for r in readings if r.t <= baseline_t + 1]
    later = [r for r in readings if r.t > baseline_t + 1]
    if not base or not later:
        return "too short to tell"
    b = base[-1].rss_mib
    growth = max(r.rss_mib for r in later) / b - 1
    word = "flat" if growth <= GROWTH_LIMIT else "growing"
    return (
        f"{word}: RSS {b:.1f} MiB at {base[-1].t / 60:.1f} min -> max "
        f"{max(r.rss_mib for r in later):.1f} MiB after ({100 * growth:+.1f}%, limit "
        f"{100 * GROWTH_LIMIT:.0f}%)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--every", type=float, default=60, help="seconds between readings")
    ap.add_argument("--headless", action="store_true", help="record --pid instead of attach")
    ap.add_argument("--workload", choices=("torch", "busy"), default=None)
    args = ap.parse_args()
    kind = args.workload or ("torch" if importlib.util.find_spec("torch") else "busy")
    if not args.headless and shutil.which("tmux") is None:
        sys.exit("tmux is needed for the dashboard soak (or pass --headless)")
    seconds = args.minutes * 60
    data = tempfile.mkdtemp(prefix="sofa-soak-")
    env = {**os.environ, "SOFA_TOP_DATA_DIR": data}
    work = subprocess.Popen(
        _workload(kind, seconds + 120),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    sock = f"sofa-soak-{os.getpid()}"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    rec: subprocess.Popen[bytes] | None = None
    try:
        if args.headless:
            cmd = [SOFA_TOP, "record", "--pid", str(work.pid)]
            rec = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
            me = psutil.Process(rec.pid)
        else:
            line = f"unset COLUMNS LINES; SOFA_TOP_DATA_DIR={data} {SOFA_TOP} attach {work.pid}"
            size = ["-x", "160", "-y", "48"]
            subprocess.run([*tmux, "new-session", "-d", *size, "bash", "-c", line], check=True)
            me = _find_sofa_top(work.pid)
        mode = "record --pid (headless)" if args.headless else "attach (dashboard, tmux 160x48)"
        print(
            f"soak: sofa-top {mode} on the {kind} workload (PID {work.pid}), "
            f"{args.minutes:g} min, a reading every {args.every:g} s",
            flush=True,
        )
        started = time.monotonic()
        marks = sorted(
            {
                *(k * args.every for k in range(1, int(seconds // args.every) + 1)),
                seconds / 6,
                seconds,
            }
        )
        readings: list[Reading] = []
        last_own, last_kids = _cpu(me)
        last_t = started
        crashed = False
        for mark in marks:
            time.sleep(max(0.0, started + mark - time.monotonic()))
            try:
                own, kids = _cpu(me)
                rss = me.memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                crashed = True
                print(f"t={mark / 60:5.1f} min  sofa-top is gone", flush=True)
                break
            now = time.monotonic()
            dt = now - last_t
            r = Reading(
                now - started, rss, 100 * (own - last_own) / dt, 100 * (kids - last_kids) / dt
            )
            readings.append(r)
            last_own, last_kids, last_t = own, kids, now
            print(
                f"t={r.t / 60:5.1f} min  RSS {r.rss_mib:6.1f} MiB  sofa-top CPU "
                f"{r.own_cpu:5.1f}% of one core  py-spy CPU {r.pyspy_cpu:4.1f}%",
                flush=True,
            )
        if readings:
            cpus = sorted(r.own_cpu for r in readings)
            print(
                f"sofa-top CPU median {cpus[len(cpus) // 2]:.1f}% of one core "
                f"(min {cpus[0]:.1f}, max {cpus[-1]:.1f})"
            )
        print("verdict: crashed" if crashed else f"verdict: {_verdict(readings, args.minutes)}")
    finally:
        if rec is not None:
            rec.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                rec.wait(30)
        else:
            subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
            tmpdir = os.environ.get("TMUX_TMPDIR") or "/tmp"
            Path(tmpdir, f"tmux-{os.getuid()}", sock).unlink(missing_ok=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(work.pid, 9)
        work.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
