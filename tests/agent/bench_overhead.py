"""Agent overhead: workload throughput with vs without the agent, over paired runs.

Not a test (pytest does not collect it). Usage::

    python tests/agent/bench_overhead.py [--pairs 5] [--only NAME ...]

Each pair runs the workload once without and once with the agent (alternating which goes
first, to cancel drift), reads the workload's own ``SELF_STEPS_PER_S`` (measured steps only,
so interpreter and framework start-up do not count) and reports the median of the per-pair
ratios with/without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_harness import base_env, run_cmd, run_with_agent, workload_cmd

CASES: dict[str, list[str]] = {
    "plain-1ms": workload_cmd(
        "agent_plain.py", "--steps", "2000", "--input-ms", "0", "--compute-ms", "1"
    ),
    "tf-eager-compute": workload_cmd("agent_tf_eager.py", "--mode", "compute", "--steps", "80"),
    "tf-eager-input": workload_cmd("agent_tf_eager.py", "--mode", "input", "--steps", "80"),
    "keras-fit-compute": workload_cmd("agent_keras_fit.py", "--mode", "compute", "--steps", "80"),
    "keras-fit-input": workload_cmd("agent_keras_fit.py", "--mode", "input", "--steps", "80"),
    "torch-compute": workload_cmd("agent_torch.py", "--mode", "compute", "--steps", "80"),
    "torch-input": workload_cmd("agent_torch.py", "--mode", "input", "--steps", "40"),
    "torch-optimizer": workload_cmd("agent_torch.py", "--mode", "optimizer", "--steps", "80"),
}


def steps_per_s(stdout: str) -> float:
    for line in reversed(stdout.splitlines()):
        if line.startswith("SELF_STEPS_PER_S="):
            return float(line.split("=", 1)[1])
    raise RuntimeError(f"no SELF_STEPS_PER_S in:\n{stdout}")


def measure(cmd: list[str], pairs: int) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got: dict[bool, float] = {}
        for with_agent in order:
            if with_agent:
                run = run_with_agent(cmd, timeout=600)
                assert run.returncode == 0, run.summary()
                got[True] = steps_per_s(run.stdout)
            else:
                proc, _ = run_cmd(cmd, base_env(), timeout=600)
                assert proc.returncode == 0, proc.stderr
                got[False] = steps_per_s(proc.stdout)
        out.append((got[False], got[True]))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--only", nargs="*", default=None)
    a = p.parse_args()
    for name, cmd in CASES.items():
        if a.only and name not in a.only:
            continue
        pairs = measure(cmd, a.pairs)
        ratios = [w / wo for wo, w in pairs]
        print(
            f"{name:18s} without {statistics.median(p[0] for p in pairs):9.2f} steps/s  "
            f"with {statistics.median(p[1] for p in pairs):9.2f} steps/s  "
            f"median ratio {statistics.median(ratios):.4f}  "
            f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
