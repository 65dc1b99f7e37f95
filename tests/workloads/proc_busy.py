"""Workload: one thread spinning on the CPU (about 100% of one core) for argv[1] seconds."""

import sys
import time

deadline = time.monotonic() + float(sys.argv[1] if len(sys.argv) > 1 else 30)
print("ready", flush=True)
n = 0
while time.monotonic() < deadline:
    n += 1
