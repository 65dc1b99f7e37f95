"""sofa-top: a live terminal profiler for deep-learning workloads."""

__version__ = "0.1.0"
