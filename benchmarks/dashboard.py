"""The dashboard's own cost: ``sofa-top attach`` in a real terminal (tmux) on a busy workload.

Prints sofa-top's CPU (% of one core, py-spy excluded and included) and RSS every
``--every`` seconds for ``--seconds`` (default 5 minutes), then the ratios the goals speak
of: CPU <= 5% of one core at 1 Hz refresh, RSS <= 150 MB and flat. Usage::

    python benchmarks/dashboard.py [--seconds 300] [--every 30]
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
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tmux is needed for this benchmark")
    work = subprocess.Popen(
        [
            sys.executable,
            str(HERE.parent / "tests/workloads/busy_python.py"),
            str(args.seconds + 60),
        ]
    )
    sock = f"sofa-bench-{os.getpid()}"
    data = tempfile.mkdtemp(prefix="sofa-bench-")
    try:
        subprocess.run(
            [
                "tmux",
                "-L",
                sock,
                "new-session",
                "-d",
                "-x",
                "160",
                "-y",
                "48",
                f"SOFA_TOP_DATA_DIR={data} {SOFA_TOP} attach {work.pid}",
            ],
            check=True,
        )
        time.sleep(3)
        me = next(
            p
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"]
            and "attach" in p.info["cmdline"]
            and str(work.pid) in p.info["cmdline"]
            and p.pid != os.getpid()
        )
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
        work.kill()
        shutil.rmtree(data, ignore_errors=True)


def _children_cpu(p: psutil.Process) -> float:
    total = 0.0
    for c in p.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(c.cpu_times()[:2])
    return total


if __name__ == "__main__":
    main()
