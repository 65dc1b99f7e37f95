"""Workload: sleeps for argv[1] seconds, then exits with code argv[2] (default 0)."""

import sys
import time

print("ready", flush=True)
time.sleep(float(sys.argv[1] if len(sys.argv) > 1 else 30))
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
