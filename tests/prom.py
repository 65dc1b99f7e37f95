"""A real Prometheus server for tests and benchmarks (Debian's ``prometheus`` package).

``PrometheusServer`` starts ``prometheus`` on 127.0.0.1 with a temporary config and data
directory, scraping the given targets every second, waits until ``/-/ready`` answers, and
stops it. ``free_port`` finds ports for it and for the sofa-top instances it scrapes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus")
SKIP_REASON = (
    "needs the prometheus binary (Debian: apt-get install -y prometheus; .ci/run installs it)"
)


def free_port() -> int:
    """A TCP port nothing listens on right now (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (host:port) every second, until ``stop``."""

    def __init__(self, targets: list[str], port: int | None = None) -> None:
        if PROMETHEUS is None:
            raise RuntimeError(SKIP_REASON)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = Path(tempfile.mkdtemp(prefix="sofa-top-prometheus-"))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "sofa-top",
                    "scrape_interval": "1s",
                    "scrape_timeout": "1s",
                    "static_configs": [{"targets": targets}],
                }
            ],
        }
        # JSON is YAML: no YAML library needed to write the config
        (self._dir / "prometheus.yml").write_text(json.dumps(config))
        self._log = (self._dir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self._dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self._dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server answers ``/-/ready`` (raises with its log when it never does)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"prometheus did not become ready:\n{self.log()[-2000:]}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def targets_up(self) -> int:
        """How many scrape targets answered their last scrape."""
        return len([r for r in self.query("up == 1")])

    def log(self) -> str:
        self._log.flush()
        return (self._dir / "prometheus.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
