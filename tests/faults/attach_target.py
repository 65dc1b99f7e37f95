"""A plain Python target for the attach fault rows (stdlib only: it also runs in a bare venv).

Modes: ``busy`` (a pure-Python loop), ``sleep`` (``time.sleep``), ``cblock`` (blocked in a C
call that released the GIL: ``select`` on a pipe nobody writes), ``gil`` (one C call that holds
the GIL for ``--gil-s`` seconds: ``sum(range(n))``), ``exit`` (exits ``--exit-after`` s after
READY). It prints ``READY``, runs until ``--stop FILE`` exists (or ``--seconds``), then prints
what an agent could have left behind and exits with ``--exit-code``.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import threading
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("busy", "sleep", "cblock", "gil", "exit"))
    p.add_argument("--stop", default="")
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--gil-s", type=float, default=6.0)
    p.add_argument("--exit-after", type=float, default=0.0)
    p.add_argument("--exit-code", type=int, default=0)
    a = p.parse_args()
    path0, meta0 = list(sys.path), list(sys.meta_path)
    until = time.monotonic() + a.seconds
    r, _w = os.pipe()
    n = 0
    # calibrate the GIL-holding call before READY, so that the call itself starts right after
    per = 2_000_000
    t0 = time.perf_counter()
    sum(range(per))
    big = int(per * a.gil_s / max(time.perf_counter() - t0, 1e-6))
    print(f"READY {os.getpid()}", flush=True)
    if a.mode == "exit":
        time.sleep(a.exit_after)
        print("EXITING", flush=True)
        return a.exit_code
    if a.mode == "gil":
        sum(range(big))  # holds the GIL throughout: nothing else runs Python meanwhile
        print("C CALL DONE", flush=True)
    while time.monotonic() < until and not (a.stop and os.path.exists(a.stop)):
        if a.mode in ("busy", "gil"):
            n = (n + sum(i * i for i in range(2000))) % 1_000_003
        elif a.mode == "sleep":
            time.sleep(0.05)
        else:
            select.select([r], [], [], 0.2)
    names = sorted(t.name for t in threading.enumerate())
    print(f"THREADS={','.join(names)}")
    print(f"SOFA_MODULES={sorted(m for m in sys.modules if m.startswith('sofa_top'))}")
    print(f"SYSPATH_SAME={sys.path == path0} META_PATH_SAME={sys.meta_path == meta0}")
    print(f"DONE {n >= 0}", flush=True)
    return a.exit_code


if __name__ == "__main__":
    sys.exit(main())
