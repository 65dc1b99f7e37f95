"""An 8-rank torchrun DDP job (gloo, CPU, a tiny model) with and without ``sofa-top record``:
the job's slowdown and sofa-top's own CPU.

Paired, interleaved runs (A B A B ...) of a fixed amount of work (``--steps`` per rank); the
job times its own training loop (``STEPS_PER_S``, rank 0, start-up excluded). sofa-top's CPU
is its own process (polled until it exits) plus py-spy's (the session's ``stacks.sampler_cpu``
over each window), as a share of one core over the recording. Usage::

    python benchmarks/ranks.py [--pairs 5] [--ranks 8] [--steps 600] [--no-stacks]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "workloads" / "ddp_ranks.py"
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(ranks: int, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1",
        f"--master_port={_port()}",
        str(WORKLOAD),
        "0",
        "--steps",
        str(steps),
        "--report",
    ]


def _rate(lines: list[str]) -> float:
    for line in lines:
        if line.startswith("STEPS_PER_S="):
            return float(line.split("=", 1)[1])
    raise RuntimeError("the job printed no STEPS_PER_S line:\n" + "\n".join(lines[-20:]))


def run_plain(ranks: int, steps: int) -> float:
    p = subprocess.run(job(ranks, steps), capture_output=True, text=True, check=True)
    return _rate(p.stdout.splitlines())


def run_recorded(ranks: int, steps: int, stacks: bool, where: Path) -> tuple[float, float, float]:
    """(steps/s, sofa-top's own CPU %, py-spy's CPU %), CPU as % of one core."""
    from sofa_top.recording.reader import SessionReader

    path = where / f"run-{time.monotonic_ns()}.sofa"
    cmd = [SOFA_TOP, "record", "-o", str(path), *([] if stacks else ["--no-stacks"]), "--"]
    rec = subprocess.Popen(
        [*cmd, *job(ranks, steps)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SOFA_TOP_DATA_DIR": str(where)},
    )
    me = psutil.Process(rec.pid)
    own = 0.0
    t0 = time.monotonic()
    while rec.poll() is None:
        try:
            t = me.cpu_times()
            own = t.user + t.system  # its own threads only; children (job, py-spy) are apart
        except psutil.Error:
            pass
        time.sleep(0.2)
    wall = time.monotonic() - t0
    reader = SessionReader(path)
    try:
        lines = [e.message for e in reader.events("log")]
        windows = [w for w in reader.stack_windows() if w.sampler_cpu is not None]
        spy = sum((w.sampler_cpu or 0.0) / 100 * (w.ts_end - w.ts_start) for w in windows)
    finally:
        reader.close()
    return _rate(lines), 100 * own / wall, 100 * spy / wall


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--no-stacks", action="store_true")
    a = p.parse_args()
    ratios, own, spy, plain_rates = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="sofa-top-bench-ranks-") as tmp:
        for i in range(a.pairs):
            base = run_plain(a.ranks, a.steps)
            rate, cpu, sampler = run_recorded(a.ranks, a.steps, not a.no_stacks, Path(tmp))
            ratios.append(base / rate - 1)
            own.append(cpu)
            spy.append(sampler)
            plain_rates.append(base)
            print(
                f"pair {i + 1}: plain {base:.2f} steps/s, recorded {rate:.2f} steps/s "
                f"({ratios[-1]:+.1%}); sofa-top {cpu:.1f}% + py-spy {sampler:.1f}% of one core",
                flush=True,
            )
    load = os.getloadavg()[0]
    print(
        f"{a.ranks} ranks, {a.steps} steps each, {a.pairs} pairs (load {load:.1f} on "
        f"{os.cpu_count()} cores):\n"
        f"  job slowdown median {statistics.median(ratios):+.1%} "
        f"({min(ratios):+.1%} .. {max(ratios):+.1%}); plain median "
        f"{statistics.median(plain_rates):.1f} steps/s\n"
        f"  sofa-top CPU median {statistics.median(own):.1f}% of one core "
        f"({min(own):.1f} .. {max(own):.1f}), py-spy {statistics.median(spy):.1f}% "
        f"({min(spy):.1f} .. {max(spy):.1f})"
    )


if __name__ == "__main__":
    main()
