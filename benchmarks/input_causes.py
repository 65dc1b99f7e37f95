"""Benchmark of cause-aware prefetch (``sofa-top compare``) on the four input-bottleneck shapes.

    .venv/bin/python benchmarks/input_causes.py [--repeats 3] [--steps 200] [--only tf-cpu ...]
                                                [--json FILE]

Shapes: ``tests/workloads/input_shapes_{tf,torch}.py --shape cpu|latency`` (serial input that
burns CPU, or that waits ~5 ms per element). Each shape is one ``run_compare`` call: the first
baseline run is diagnosed, the prefetch parallelism is picked from it (searched for latency),
then the configurations run interleaved. Printed per shape: the diagnosed cause, the chosen
parallelism, the search levels, the speedup of prefetch vs baseline (ratio of medians; the
spread is the min and max prefetch repeat over the baseline median), the headroom and the
fraction of it reached.

CPU shapes also run prefetch at twice the core count (``prefetch-2x``): the best measured
setting is the faster of the two, and the headroom estimate is compared with it.

Goals: latency shapes >= 5x with parallelism above the core count, for both frameworks; CPU
shapes: chosen parallelism = cores and the headroom estimate within 15% of the best setting.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sofa_top.agent.toggles import OptimizeSpec, PrefetchOptions
from sofa_top.optimizers.compare import (
    CompareEvent,
    CompareResult,
    ConfigResult,
    RunStarted,
    SearchLevelStarted,
    run_compare,
)
from sofa_top.optimizers.compare.text import progress_line
from sofa_top.optimizers.probes import usable_cores

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("tf-cpu", "tf-latency", "torch-cpu", "torch-latency")


def _run(r: CompareResult, config: str) -> ConfigResult:
    return next(x for x in r.runs if x.config == config)


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def summarize(shape: str, r: CompareResult, cores: int) -> dict[str, Any]:
    """The numbers this benchmark reports for one shape, with its goal checked."""
    base, pre = _run(r, "baseline"), _run(r, "prefetch")
    bmed = base.throughput.median
    rates = [o.rate for o in pre.outcomes if o.rate is not None]
    spread = [min(rates) / bmed, max(rates) / bmed] if rates and bmed else [None, None]
    out: dict[str, Any] = {
        "shape": shape,
        "cause": r.diagnosis.cause if r.diagnosis else None,
        "chosen": r.search.chosen if r.search else None,
        "search": [
            (lv.parallelism, lv.throughput, lv.memory, lv.rss)
            for lv in (r.search.levels if r.search else ())
        ],
        "stop": r.search.stop if r.search else None,
        "baseline": asdict(base.throughput),
        "prefetch": asdict(pre.throughput),
        "speedup": pre.speedup,
        "speedup_spread": spread,
        "headroom": asdict(pre.headroom),
        "flags": {c.config: c.flags for c in r.runs if c.flags},
    }
    if shape.endswith("latency"):
        ok = (pre.speedup or 0) >= 5 and (pre.parallelism or 0) > cores
        out["goal"] = f">= 5x with parallelism > {cores}: {'met' if ok else 'NOT met'}"
    else:
        candidates = [c for c in r.runs if c.config.startswith("prefetch")]
        best = max(candidates, key=lambda c: c.throughput.median or 0)
        est = pre.headroom.throughput
        err = None if not est or not best.throughput.median else est / best.throughput.median
        out["best_setting"] = {"config": best.config, "throughput": asdict(best.throughput)}
        out["headroom_vs_best"] = err
        ok = pre.parallelism == cores and err is not None and abs(err - 1) <= 0.15
        out["goal"] = (
            f"parallelism = {cores} and headroom within 15% of the best setting: "
            f"{'met' if ok else 'NOT met'}"
        )
    return out


def _print(s: dict[str, Any]) -> None:
    b, p, h = s["baseline"], s["prefetch"], s["headroom"]
    lo, hi = s["speedup_spread"]
    print(f"  cause {s['cause']}, parallelism {s['chosen']} ({s['stop']})")
    for par, rate, mem, rss in s["search"]:
        print(
            f"    search p={par}: {rate or 0:.1f} {b['unit']}, memory {(mem or 0) / 2**20:.0f} "
            f"MiB PSS, {(rss or 0) / 2**20:.0f} MiB summed RSS"
        )
    print(f"  baseline {b['median']:.1f} ({b['min']:.1f}-{b['max']:.1f}) {b['unit']}")
    print(f"  prefetch {p['median']:.1f} ({p['min']:.1f}-{p['max']:.1f}) {p['unit']}")
    sp = s["speedup"] or 0
    print(f"  speedup {sp:.2f}x ({lo or 0:.2f}-{hi or 0:.2f}x)")
    print(
        f"  headroom {h.get('throughput') or 0:.1f} {h.get('unit')} ({h.get('bound')}), "
        f"reached {h.get('fraction_reached') or 0:.0%}: {h.get('text')}"
    )
    if "best_setting" in s:
        best = s["best_setting"]
        print(
            f"  best setting {best['config']} {best['throughput']['median']:.1f}; headroom / "
            f"best = {s['headroom_vs_best'] or 0:.2f}"
        )
    if s["flags"]:
        print(f"  flags {s['flags']}")
    print(f"  goal: {s['goal']}", flush=True)


def _progress(event: CompareEvent) -> None:
    # results, the diagnosis and the search's end; not the session paths
    if not isinstance(event, RunStarted | SearchLevelStarted):
        print(f"    {progress_line(event).strip()}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--only", choices=SHAPES, action="append")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    cores = usable_cores()
    results: list[dict[str, Any]] = []
    for shape in a.only or SHAPES:
        framework, kind = shape.split("-")
        workload = ROOT / "tests" / "workloads" / f"input_shapes_{framework}.py"
        cmd = [sys.executable, str(workload), "--shape", kind, "--seconds", "600"]
        configs = ["baseline", "prefetch"]
        extra: dict[str, OptimizeSpec] = {}
        if kind == "cpu":
            extra["prefetch-2x"] = OptimizeSpec(prefetch=PrefetchOptions(parallelism=2 * cores))
            configs.append("prefetch-2x")
        print(f"\n{shape} ({cores} cores, {_load()})\n  cmd: {' '.join(cmd)}", flush=True)
        r = run_compare(
            cmd, configs, repeats=a.repeats, steps=a.steps, warmup_steps=a.warmup_steps,
            optimize=extra or None,
            on_progress=_progress,
        )  # fmt: skip
        s = summarize(shape, r, cores)
        s["load_after"] = _load()
        results.append(s)
        _print(s)
    print(
        "\n| shape | cause | parallelism (levels tried) | baseline | prefetch | speedup "
        "median (min-max) | headroom (bound) | reached | goal |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for s in results:
        h, b, p = s["headroom"], s["baseline"], s["prefetch"]
        lo, hi = s["speedup_spread"]
        tried = ", ".join(str(lv[0]) for lv in s["search"]) or "-"
        goal = s["goal"].rsplit(": ", 1)[1]
        if "headroom_vs_best" in s:
            goal += f" (headroom / best {s['headroom_vs_best'] or 0:.2f})"
        print(
            f"| {s['shape']} | {s['cause']} | {s['chosen']} ({tried}) | {b['median']:.0f} "
            f"({b['min']:.0f}-{b['max']:.0f}) | {p['median']:.0f} ({p['min']:.0f}-{p['max']:.0f}) "
            f"| {s['speedup'] or 0:.2f}x ({lo or 0:.2f}-{hi or 0:.2f}) | "
            f"{h.get('throughput') or 0:.0f} {h.get('unit')} ({h.get('bound')}) | "
            f"{h.get('fraction_reached') or 0:.0%}: {h.get('text')} | {goal} |"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2, default=str))
    bad = [s["shape"] for s in results if "NOT met" in s["goal"]]
    if bad:
        print(f"goals not met: {', '.join(bad)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
