"""Prometheus: serve a session's figures at ``/metrics`` and read a cluster's back with PromQL."""
