"""Where ``--metrics-port`` serves (no ``prometheus_client`` here: the CLI parses the flag
whether or not the exporter, which needs it, ever starts)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class MetricsSpec:
    """Where to serve: ``--metrics-port`` (0: any free port) and ``--metrics-host``."""

    port: int
    host: str = DEFAULT_HOST
