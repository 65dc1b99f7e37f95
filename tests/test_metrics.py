"""``--metrics-port`` and ``sofa-top cluster`` without a Prometheus server: what is served, where
it listens, and the bad input (a port in use, an unreachable server, a bad URL): one line each,
a non-zero exit, nothing started and nothing recorded lost."""

from __future__ import annotations

import http.server
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import psutil
from conftest import SOFA_TOP, WORKLOADS, run_cli
from procs import wait_until
from prom import free_port
from prometheus_client.parser import text_string_to_metric_families


def test_a_metrics_port_in_use_stops_everything_before_it_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli(
            "record",
            "--metrics-port",
            str(port),
            "-o",
            str(tmp_path / "s.sofa"),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        )
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in r.stderr and "in use" in r.stderr
    assert not marker.exists()  # the command never started
    assert not (tmp_path / "s.sofa").exists()  # and no session was begun


def test_metrics_host_needs_a_port() -> None:
    r = run_cli("record", "--metrics-host", "0.0.0.0", "--", sys.executable, "-c", "pass")
    assert r.returncode != 0 and r.stderr.strip() == (
        "sofa-top: --metrics-host needs --metrics-port"
    )


def test_cluster_says_in_one_line_what_is_wrong() -> None:
    port = free_port()  # nothing listens there
    r = run_cli("cluster", "--prometheus", f"http://127.0.0.1:{port}", "--json")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"cannot reach Prometheus at http://127.0.0.1:{port}" in r.stderr
    r = run_cli("cluster", "--prometheus", "127.0.0.1:9090")
    assert r.returncode != 0 and "needs an http(s) URL" in r.stderr and r.stderr.count("\n") == 1
    # something that answers HTTP but is no Prometheus (a file server, say)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = run_cli("cluster", "--prometheus", f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "refused the query: HTTP 404" in r.stderr


def test_a_plain_job_is_served_on_localhost_as_rank_0(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            SOFA_TOP,
            "record",
            "--no-stacks",
            "--name",
            "plain-job",
            "--metrics-port",
            str(port),
            "-o",
            str(tmp_path / "s.sofa"),
            "--",
            sys.executable,
            str(WORKLOADS / "agent_plain.py"),
            "--steps",
            "1000000",
            "--input-ms",
            "5",
            "--compute-ms",
            "5",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def scrape() -> str:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return str(r.read().decode())
        except OSError:
            return ""

    try:
        assert wait_until(lambda: "sofa_top_step_seconds{" in scrape(), 60, 0.2), proc.stderr
        families = {f.name: f for f in text_string_to_metric_families(scrape())}
        step = families["sofa_top_step_seconds"].samples[0]
        assert step.labels["run"] == "plain-job" and step.labels["rank"] == "0"
        assert set(step.labels) == {"run", "node", "rank", "local_rank"}
        assert 0.005 < step.value < 1.0
        wait = families["sofa_top_input_wait_ratio"].samples[0].value
        assert 0.2 < wait < 0.8  # 5 ms of input in a ~10 ms step
        # no collective wait measured for a job without torch.distributed: absent, not 0
        assert (
            not families.get("sofa_top_collective_wait_ratio")
            or not families["sofa_top_collective_wait_ratio"].samples
        )
        verdicts = families["sofa_top_verdict_info"].samples
        assert [v.labels["kind"] for v in verdicts if v.value == 1] == ["input-bound"]
        # it listens on 127.0.0.1 only
        listening = [
            c.laddr
            for c in psutil.Process(proc.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        ]
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err  # Ctrl-C
    assert scrape() == ""  # it stops serving with the recording
