"""Workload slowdown under ``sofa-top record --pid`` (attach, default rates) vs no profiler,
and under the in-process agent (launch mode) vs none.

Paired, interleaved runs (A B A B ...) so machine drift cancels; prints per-pair ratios, the
median and the spread. Usage::

    python benchmarks/overhead.py [--pairs 5] [--kinds python,torch,torch150] [--agent]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
WORKLOAD = HERE / "bench_workload.py"
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))


def _elapsed(out: str) -> float:
    for line in out.splitlines():
        if line.startswith("ELAPSED "):
            return float(line.split()[1])
    raise RuntimeError(f"workload printed no ELAPSED line: {out[-500:]}")


def run_plain(kind: str, env: dict[str, str] | None = None) -> float:
    """The workload alone."""
    p = subprocess.run(
        [sys.executable, str(WORKLOAD), kind], capture_output=True, text=True, env=env, check=True
    )
    return _elapsed(p.stdout)


def run_attached(kind: str, data_dir: str) -> tuple[float, float]:
    """The workload with ``sofa-top record --pid`` attached for its whole run; returns the
    workload's time and sofa-top's own CPU seconds (py-spy included)."""
    w = subprocess.Popen([sys.executable, str(WORKLOAD), kind], stdout=subprocess.PIPE, text=True)
    rec = subprocess.Popen(
        [SOFA_TOP, "record", "--pid", str(w.pid), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SOFA_TOP_DATA_DIR": data_dir},
    )
    out, _ = w.communicate()
    _, _, ru = os.wait4(rec.pid, 0)
    return _elapsed(out), ru.ru_utime + ru.ru_stime


def run_with_agent(kind: str) -> float:
    """The workload with the agent injected and a live agent server, as ``launch`` does."""
    from sofa_top.agent.launch_env import agent_env
    from sofa_top.collectors.agent import AgentCollector, AgentServer

    server = AgentServer()
    stop = threading.Event()
    t = threading.Thread(target=AgentCollector(server).run, args=(lambda s: None, stop))
    t.start()
    try:
        env = {**os.environ, **agent_env(server.socket_path, {})}
        return run_plain(kind, env)
    finally:
        stop.set()
        t.join(5)
        server.close()


def summarize(name: str, ratios: list[float]) -> str:
    med = statistics.median(ratios)
    return (
        f"{name:<28} slowdown median {100 * (med - 1):+6.2f}%  "
        f"(min {100 * (min(ratios) - 1):+.2f}%, max {100 * (max(ratios) - 1):+.2f}%, "
        f"n={len(ratios)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--kinds", default="python,torch,torch150")
    ap.add_argument("--agent", action="store_true", help="also measure the launch-mode agent")
    args = ap.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as data_dir:
        for kind in args.kinds.split(","):
            ratios, agent_ratios = [], []
            for i in range(args.pairs):
                base = run_plain(kind)
                t0 = time.monotonic()
                attached, cpu_s = run_attached(kind, data_dir)
                ratios.append(attached / base)
                line = (
                    f"{kind} pair {i + 1}: plain {base:.3f}s attached {attached:.3f}s "
                    f"(sofa-top+py-spy CPU {cpu_s:.2f}s)"
                )
                if args.agent:
                    base2 = run_plain(kind)
                    agent = run_with_agent(kind)
                    agent_ratios.append(agent / base2)
                    line += f" | plain {base2:.3f}s agent {agent:.3f}s"
                print(line + f" ({time.monotonic() - t0:.0f}s)", flush=True)
            lines.append(summarize(f"record --pid ({kind})", ratios))
            if agent_ratios:
                lines.append(summarize(f"agent ({kind})", agent_ratios))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
