"""The cluster verdict at 64 and 512 ranks: synthetic per-rank metrics, served by sofa-top's own
exporter code and scraped by a real Prometheus, then ``sofa-top cluster --json``.

Each simulated job has one straggler (input-bound on latency, waiting 15% in collectives) and
ranks that wait 70-85% of each step for it, spread over nodes of 8 ranks. Printed: whether
``cluster`` names the right rank, its wall time (the whole command, Python start-up included;
median and range of ``--repeats``), and the time of the verdict function alone. Needs the
``prometheus`` binary (Debian: ``apt-get install -y prometheus``). Usage::

    python benchmarks/cluster_scale.py [--ranks 64,512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from prom import PrometheusServer, free_port  # noqa: E402

from sofa_top.analysis.ranks import cross_rank_verdict  # noqa: E402
from sofa_top.datamodel.ranks import RankStat  # noqa: E402
from sofa_top.datamodel.snapshot import Snapshot, TargetInfo  # noqa: E402
from sofa_top.datamodel.verdict import Verdict  # noqa: E402
from sofa_top.metrics.exporter import MetricsExporter, MetricsSpec  # noqa: E402

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
PER_NODE = 8


def ranks(world: int) -> tuple[RankStat, ...]:
    straggler = world - 3
    out = []
    for r in range(world):
        slow = r == straggler
        verdict = (
            Verdict("input-bound", 0.9, "input-bound", {"input_cause": "latency"}, severity="high")
            if slow
            else Verdict("compute-bound", 0.9, "compute-bound")
        )
        out.append(
            RankStat(
                rank=r,
                pid=10_000 + r,
                node=f"node{r // PER_NODE}/{r // PER_NODE}",
                local_rank=r % PER_NODE,
                world_size=world,
                steps=200,
                step_s=0.05,
                input_wait_fraction=0.7 if slow else 0.01,
                collective_wait_fraction=0.15 if slow else 0.70 + (r % 16) / 100,
                verdict=verdict,
                cpu_percent=20.0,
            )
        )
    return tuple(out)


def snapshot(world: int) -> Snapshot:
    now = time.time()
    return Snapshot(
        ts=now,
        started=now,
        target=TargetInfo(1, "torchrun", ("torchrun",)),
        session_path="",
        recording=True,
        history={},
        ranks=ranks(world),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="64,512")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    for world in (int(x) for x in a.ranks.split(",")):
        stats = ranks(world)
        t0 = time.perf_counter()
        for _ in range(100):
            v = cross_rank_verdict(stats)
        direct_ms = (time.perf_counter() - t0) * 10
        assert v is not None and v.evidence["rank"] == world - 3
        exporter = MetricsExporter(MetricsSpec(port=free_port()), f"sim-{world}")
        exporter.update(snapshot(world))
        with PrometheusServer([f"127.0.0.1:{exporter.port}"]) as prom:
            prom.wait_ready()
            while len(prom.query("sofa_top_collective_wait_ratio")) < world:
                time.sleep(0.5)
            walls, right = [], 0
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                r = subprocess.run(
                    [SOFA_TOP, "cluster", "--prometheus", prom.url, "--json"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                walls.append(time.perf_counter() - t0)
                out = json.loads(r.stdout)
                right += int(out["straggler"]["rank"] == world - 3 and len(out["ranks"]) == world)
        exporter.close()
        print(
            f"{world} ranks on {world // PER_NODE} nodes: cluster --json named the straggler "
            f"{right}/{a.repeats} times; wall median {statistics.median(walls):.2f} s "
            f"({min(walls):.2f} .. {max(walls):.2f}); the verdict alone {direct_ms:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
