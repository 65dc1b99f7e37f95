"""The dashboard's own cost in a real terminal (tmux): ``sofa-top attach`` on a busy Python loop
(``--workload busy``) or ``sofa-top demo torch`` (``--workload torch``: launch mode, the agent's
steps, the log pane and a hot-functions table that changes every second).

Prints sofa-top's CPU (% of one core, py-spy excluded and included) and RSS every
``--every`` seconds for ``--seconds`` (default 5 minutes), then the ratios the goals speak
of: CPU <= 5% of one core at 1 Hz refresh, RSS <= 150 MB and flat. sofa-top's CPU is its own
process's CPU time (not wall time), so other jobs on the machine change it little. Usage::

    python benchmarks/dashboard.py [--workload busy|torch] [--seconds 300] [--every 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).parent
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--every", type=float, default=30)
    ap.add_argument("--workload", choices=("busy", "torch"), default="busy")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is needed for this benchmark")
    work: subprocess.Popen[bytes] | None = None
    if args.workload == "busy":
        loop = HERE.parent / "tests/workloads/busy_python.py"
        work = subprocess.Popen([sys.executable, str(loop), str(args.seconds + 60)])
        command, marker = f"{SOFA_TOP} attach {work.pid}", str(work.pid)
    else:
        command, marker = f"{SOFA_TOP} demo torch", "demo"
    sock = f"sofa-bench-{os.getpid()}"
    data = tempfile.mkdtemp(prefix="sofa-bench-")
    try:
        subprocess.run(
            ["tmux", "-L", sock, "new-session", "-d", "-x", "160", "-y", "48",
             f"SOFA_TOP_DATA_DIR={data} {command}"],
            check=True,
        )  # fmt: skip
        me = _wait_for_sofa_top(marker)
        time.sleep(5)  # past start-up (imports, the first layout): the benchmark is steady state
        rows = []
        t_start = time.monotonic()
        last_cpu = sum(me.cpu_times()[:2])
        last_children = _children_cpu(me)
        last_t = t_start
        while time.monotonic() - t_start < args.seconds:
            time.sleep(args.every)
            now = time.monotonic()
            cpu = sum(me.cpu_times()[:2])
            children = _children_cpu(me)
            own = 100 * (cpu - last_cpu) / (now - last_t)
            spy = 100 * (children - last_children) / (now - last_t)
            rss = me.memory_info().rss / 2**20
            rows.append((now - t_start, own, spy, rss))
            print(
                f"t={now - t_start:5.0f}s  sofa-top CPU {own:5.1f}% of one core  "
                f"py-spy CPU {spy:5.1f}%  RSS {rss:6.1f} MiB",
                flush=True,
            )
            last_cpu, last_children, last_t = cpu, children, now
        owns = sorted(r[1] for r in rows)
        print(
            f"sofa-top CPU median {owns[len(owns) // 2]:.1f}% of one core "
            f"(min {owns[0]:.1f}, max {owns[-1]:.1f}); goal <= 5%"
        )
        first, last = rows[0][3], rows[-1][3]
        print(
            f"RSS first {first:.1f} MiB, last {last:.1f} MiB "
            f"(growth {100 * (last / first - 1):+.1f}%); goal <= 150 MB and flat"
        )
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], check=False)
        if work is not None:
            work.kill()
        shutil.rmtree(data, ignore_errors=True)


def _wait_for_sofa_top(marker: str, timeout: float = 60.0) -> psutil.Process:
    """The sofa-top process tmux started (its command line holds ``marker``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if (
                p.pid != os.getpid()
                and any(c.endswith("sofa-top") for c in cmd[:2])
                and marker in cmd
            ):
                return p
        time.sleep(0.2)
    sys.exit("sofa-top did not start in tmux")


def _children_cpu(p: psutil.Process) -> float:
    """py-spy's CPU: sofa-top's py-spy children (a launched workload is a child too)."""
    total = 0.0
    for c in p.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if c.name() == "py-spy":
                total += sum(c.cpu_times()[:2])
    return total


if __name__ == "__main__":
    main()
