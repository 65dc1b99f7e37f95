"""Benchmark of the optimizer toggles (``sofa-top compare``) on the bundled workloads.

    .venv/bin/python benchmarks/optimizers.py [--repeats 3] [--steps 60] [--json FILE]

Every ratio comes from one ``run_compare`` call: the configurations are re-run interleaved
(A B A B ...), the throughput is the agent's samples/s (or steps/s) after the warm-up steps, and
the speedup is the ratio of medians; min-max over the repeats is the spread.

1. TF input-bound demo: ``prefetch`` (tf.data parallel map + prefetch) vs baseline; also
   ``prefetch+xla``. Goal: >= 1.8x.
2. torch input-bound demo: ``prefetch`` (DataLoader workers) vs baseline. Goal: >= 1.6x.
3. XLA / torch.compile on a compute-bound torch loop, with the compile time reported
   separately (``compile_s``: excess of the warm-up steps over the steady median, or the first
   compiled call's duration as the agent measured it).
4. Depth-first execution has its own benchmark: ``benchmarks/depth_first.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sofa_top.agent.toggles import OptimizeSpec
from sofa_top.optimizers.compare import CompareResult, run_compare
from sofa_top.optimizers.compare.text import progress_line

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _line(r: CompareResult, config: str) -> str:
    c = next(x for x in r.runs if x.config == config)
    t = c.throughput
    if t.median is None:
        return f"  {config:>14}: failed {c.errors}"
    sp = "-" if c.speedup is None else f"{c.speedup:.2f}x"
    comp = "-" if c.compile_s is None else f"{c.compile_s:.1f}"
    return (
        f"  {config:>14}: {t.median:8.1f} {t.unit} (min {t.min or 0:.1f}, max {t.max or 0:.1f})"
        f"  speedup {sp}  compile_s {comp}  applied {c.applied} flags {c.flags}"
        f"  parallelism {c.parallelism}  headroom: {c.headroom.text or '-'}"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--only", choices=("tf", "torch", "cpu-shape", "compile"), action="append")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    only = set(a.only or ("tf", "torch", "cpu-shape", "compile"))
    results: dict[str, Any] = {}

    def bench(key: str, title: str, cmd: list[str], configs: dict[str, dict[str, Any]]) -> None:
        print(f"\n{title}\n  cmd: {' '.join(cmd)}", flush=True)
        specs = {name: OptimizeSpec.from_json(c)[0] for name, c in configs.items()}
        r = run_compare(
            cmd,
            list(configs),
            repeats=a.repeats,
            steps=a.steps,
            warmup_steps=a.warmup_steps,
            optimize=specs,
            on_progress=lambda e: print("   ", progress_line(e), file=sys.stderr, flush=True),
        )
        d = r.diagnosis
        if d is not None:
            print(f"  diagnosis: {d.cause} input ({d.input_cpu_cores} cores busy while waited on)")
        if r.search:
            print(f"  search: chosen {r.search.chosen} ({r.search.stop})")
        for c in configs:
            print(_line(r, c), flush=True)
        results[key] = r.to_json()

    if "tf" in only:
        bench(
            "tf_prefetch",
            "1. TF input-bound demo: prefetch + parallelism vs baseline (goal >= 1.8x)",
            [PY, "-m", "sofa_top.demos.tf_input_bound"],
            {
                "baseline": {},
                "prefetch": {"prefetch": {"deterministic": False}},
                "prefetch+xla": {"prefetch": {"deterministic": False}, "xla": True},
            },
        )
    if "torch" in only:
        bench(
            "torch_prefetch",
            "2. torch input-bound demo: DataLoader workers vs baseline (goal >= 1.6x)",
            [PY, "-m", "sofa_top.demos.torch_input_bound"],
            {"baseline": {}, "prefetch": {"prefetch": True}},
        )
    if "cpu-shape" in only:
        # The same demos with no storage latency and a heavier decode: CPU-bound input, where
        # 2 cores cap what any parallelism can do (the headroom column says how close it got).
        bench(
            "tf_prefetch_cpu",
            "1b. TF demo, CPU-bound input (--storage-ms 0): prefetch vs baseline",
            [
                PY,
                "-m",
                "sofa_top.demos.tf_input_bound",
                "--storage-ms",
                "0",
                "--decode-iters",
                "40",
            ],
            {"baseline": {}, "prefetch": {"prefetch": {"deterministic": False}}},
        )
        bench(
            "torch_prefetch_cpu",
            "2b. torch demo, CPU-bound input (--storage-ms 0): workers vs baseline",
            [
                PY,
                "-m",
                "sofa_top.demos.torch_input_bound",
                "--storage-ms",
                "0",
                "--decode-iters",
                "12",
            ],
            {"baseline": {}, "prefetch": {"prefetch": True}},
        )
    if "compile" in only:
        bench(
            "torch_compile",
            "3. compute-bound torch loop: torch.compile vs baseline (compile time apart)",
            [PY, str(ROOT / "tests" / "workloads" / "torch_compute_bound.py"), "600"],
            {"baseline": {}, "xla": {"xla": True}},
        )
    print("\n4. depth-first: see benchmarks/depth_first.py")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
