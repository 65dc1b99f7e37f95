"""Past one machine: a real Prometheus server scraping two sofa-top instances, each recording one
node of a two-node torchrun job on this machine (``--nnodes=2 --node_rank=0/1``, gloo, CPU);
``sofa-top cluster`` finds the straggler across the nodes while the job runs, and every panel
of the shipped Grafana dashboard answers from the same server.

Skips, saying why, where the ``prometheus`` binary is missing (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SOFA_TOP, run_cli
from procs import wait_until
from prom import PROMETHEUS, SKIP_REASON, PrometheusServer, free_port
from test_ranks_torchrun import torchrun
from test_tui_pilot import run_async, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason=SKIP_REASON),
]

RUN = "two-node-job"
EXAMPLES = REPO / "examples" / "prometheus"


@dataclass
class TwoNodes:
    prom: PrometheusServer
    records: list[subprocess.Popen[str]]
    sessions: list[Path]

    def running(self) -> bool:
        return all(p.poll() is None for p in self.records)


def validate_cluster_json(instance: object) -> None:
    """``cluster --json`` against ``sofa_top/metrics/cluster.schema.json`` (its ranks and
    straggler refer to ``record.schema.json``'s)."""
    import jsonschema
    from referencing import Registry, Resource

    from sofa_top.recording.report import SCHEMA_FILE as RECORD

    cluster = json.loads((REPO / "sofa_top/metrics/cluster.schema.json").read_text())
    record = json.loads(RECORD.read_text())
    registry: Registry[Any] = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in (cluster, record)
    )
    jsonschema.Draft202012Validator.check_schema(cluster)
    jsonschema.Draft202012Validator(cluster, registry=registry).validate(instance)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    """Two sofa-top ``record``s, one per node of a 4-rank job (2 per node); global rank 2
    (node 1, local rank 0) sleeps 4 ms per sample; Prometheus scrapes both every second."""
    where = tmp_path_factory.mktemp("two-nodes")
    env = {**os.environ, "SOFA_TOP_DATA_DIR": str(where / "data")}
    ports, master = [free_port(), free_port()], free_port()
    records: list[subprocess.Popen[str]] = []
    sessions = [where / "node0.sofa", where / "node1.sofa"]
    prom = PrometheusServer([f"127.0.0.1:{p}" for p in ports])
    try:
        for node in (0, 1):
            job = torchrun(2, "3600", "--slow-rank", "2", nnodes=2, node_rank=node, port=master)
            cmd = [SOFA_TOP, "record", "--name", RUN, "--metrics-port", str(ports[node])]
            records.append(
                subprocess.Popen(
                    [*cmd, "-o", str(sessions[node]), "--", *job],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    env=env,
                )
            )
        prom.wait_ready()
        yield TwoNodes(prom, records, sessions)
    finally:
        for p in records:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in records:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        prom.stop()


def cluster(prom: PrometheusServer, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("cluster", "--prometheus", prom.url, *args, timeout=30)


def straggler_found(nodes: TwoNodes) -> dict[str, Any] | None:
    r = cluster(nodes.prom, "--json", "--run", RUN)
    if r.returncode != 0:
        return None
    out: dict[str, Any] = json.loads(r.stdout)
    ranks = out["ranks"]
    if len(ranks) == 4 and all(x["steps"] >= 50 for x in ranks) and out["straggler"]:
        return out
    return None


def test_cluster_finds_the_straggler_across_nodes_while_the_job_runs(two_nodes: TwoNodes) -> None:
    found: dict[str, dict[str, Any]] = {}

    def named() -> bool:
        if not two_nodes.running():
            return True  # a node's recording ended: fail below, not by timing out
        out = straggler_found(two_nodes)
        if out is not None:
            found["out"] = out
        return out is not None

    assert wait_until(named, 240, 1.0), "cluster never named a straggler"
    assert "out" in found and two_nodes.running(), "the job must still be running"
    out = found["out"]
    validate_cluster_json(out)
    host = platform.node()
    ranks = {r["rank"]: r for r in out["ranks"]}
    assert {r["node"] for r in ranks.values()} == {f"{host}/0", f"{host}/1"}
    assert {r["run"] for r in ranks.values()} == {RUN}
    straggler = out["straggler"]
    assert (straggler["rank"], straggler["node"], straggler["cause"]) == (2, f"{host}/1", "latency")
    assert straggler["verdict"] == "input-bound" and straggler["run"] == RUN
    assert ranks[2]["local_rank"] == 0
    for r in (0, 1, 3):  # the ranks on both nodes wait for it
        assert ranks[r]["collective_wait_fraction"] >= 0.30, ranks[r]
    assert [run["run"] for run in out["runs"]] == [RUN]


def test_series_carry_run_rank_local_rank_and_node_never_job(two_nodes: TwoNodes) -> None:
    prom = two_nodes.prom
    assert wait_until(lambda: len(prom.query("sofa_top_step_seconds")) == 4, 120, 0.5)
    for name in (
        "sofa_top_step_seconds",
        "sofa_top_input_wait_ratio",
        "sofa_top_collective_wait_ratio",
        "sofa_top_verdict_info",
        "sofa_top_process_cpu_percent",
        "sofa_top_process_rss_bytes",
        "sofa_top_tree_cpu_percent",
        "sofa_top_system_cpu_percent",
    ):
        series = prom.query(name)
        assert series, name
        for s in series:
            labels = s["metric"]
            assert labels["run"] == RUN and labels["node"]
            # Prometheus sets job itself; a job label of ours would have become exported_job
            assert labels["job"] == "sofa-top" and "exported_job" not in labels
            if name not in ("sofa_top_tree_cpu_percent", "sofa_top_system_cpu_percent"):
                assert labels["rank"].isdigit() and labels["local_rank"].isdigit()
    # no GPU on this machine: the GPU gauges are absent, not zero
    assert prom.query("sofa_top_gpu_utilization_percent") == []


def _panel_queries() -> list[tuple[str, str]]:
    dash = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def test_every_grafana_panel_answers_from_the_test_prometheus(two_nodes: TwoNodes) -> None:
    prom = two_nodes.prom
    assert wait_until(lambda: len(prom.query("sofa_top_collective_wait_ratio")) == 4, 120, 0.5)
    queries = _panel_queries()
    assert len(queries) >= 10
    for title, expr in queries:
        # Grafana substitutes the run variable (=~: a regex; "All" is .*)
        result = prom.query(expr.replace("$run", RUN))
        if "gpu" in expr:
            assert result == [], title  # valid PromQL; no GPU here
        else:
            assert result, f"{title}: {expr}"
    straggler = next(e for t, e in queries if t.startswith("Straggler")).replace("$run", RUN)

    def ranks() -> list[str]:
        return [s["metric"]["rank"] for s in prom.query(straggler)]

    # the panel reads the last scrape: on a busy machine another rank's own time can lead
    # for a scrape or two while the job runs on; rank 2's 4 ms per sample is what stays
    assert wait_until(lambda: ranks() == ["2"], 120, 1.0), ranks()


def test_the_scrape_example_is_a_valid_prometheus_config() -> None:
    promtool = Path(PROMETHEUS or "").with_name("promtool")
    if not promtool.exists():
        pytest.skip("promtool not installed beside prometheus")
    r = subprocess.run(
        [str(promtool), "check", "config", str(EXAMPLES / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_run_that_matches_nothing_is_one_line(two_nodes: TwoNodes) -> None:
    assert wait_until(lambda: bool(two_nodes.prom.query("sofa_top_info")), 60, 0.5)
    r = cluster(two_nodes.prom, "--run", "no-such-run", "--json")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "no sofa-top metrics for run 'no-such-run'" in r.stderr and RUN in r.stderr


def test_cluster_prints_a_table_when_piped(two_nodes: TwoNodes) -> None:
    assert wait_until(lambda: straggler_found(two_nodes) is not None, 240, 1.0)
    r = cluster(two_nodes.prom)
    assert r.returncode == 0, r.stderr
    assert f"run {RUN}" in r.stdout and "straggler: rank 2" in r.stdout


@run_async
async def test_the_cluster_view_highlights_the_straggler(two_nodes: TwoNodes) -> None:
    from sofa_top.metrics.cluster import Prometheus, read_cluster
    from sofa_top.tui.cluster_app import ClusterApp, verdict_text

    assert wait_until(lambda: straggler_found(two_nodes) is not None, 240, 1.0)
    prom = Prometheus(two_nodes.prom.url)
    app = ClusterApp(lambda: read_cluster(prom, RUN), read_cluster(prom, RUN), prom.url, 0.5)
    async with app.run_test(size=(160, 30)) as pilot:
        await wait_for(lambda: len(app.ranks.body.ranks) == 4, 20)
        await pilot.pause()
        rows = app.ranks.body.text_lines()
        straggler = [t for t in rows[1:] if t.style and "bold" in str(t.style)]
        assert [t.plain.split()[1] for t in straggler] == ["2"]  # columns: run, rank, ...
        assert "STRAGGLER" in verdict_text(app.runs[0], 200).plain
        await pilot.press("q")
