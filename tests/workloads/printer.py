"""Prints the way training scripts do, for the output-capture tests (no flush, no -u).

1. ``first line`` on stdout, then waits until the file ``argv[1]`` exists (the test creates it
   once the session has the line: so the line arrived while the workload ran);
2. a progress bar on stderr: tqdm's when it is installed, else 500 ``\\r``-rewrites, then a
   newline; then ``after the bar``;
3. ``isatty=<sys.stdout.isatty()>`` and ``line_buffering=<...>`` (what the workload sees);
4. ``the end`` without a newline, then sleeps until it is stopped (SIGTERM).
"""

from __future__ import annotations

import os
import sys
import time

print("first line")
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
try:
    from tqdm import tqdm

    for _ in tqdm(range(500), mininterval=0, desc="bar"):
        time.sleep(0.002)
    print("tqdm", file=sys.stderr)
except ImportError:
    for i in range(500):
        sys.stderr.write(f"\rbar {i + 1}/500")
        time.sleep(0.002)
    sys.stderr.write("\n")
print("after the bar")
print(f"isatty={sys.stdout.isatty()}")
print(f"line_buffering={sys.stdout.line_buffering}")
print("the end", end="")
while True:
    time.sleep(0.05)
