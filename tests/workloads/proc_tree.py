"""Workload: a parent that starts and stops children on command, for the process collector.

Prints "ready", then reads one command per line from stdin and answers one line each:
  spawn          start a sleeping Python child; answers its PID
  spawn-mp       start a multiprocessing "spawn" child; answers its PID
  grandchild     start a child that starts its own child; answers "<child> <grandchild>"
  kill PID       terminate a child and reap it; answers "ok"
  kill-nowait P  terminate a child without reaping it (it stays a zombie); answers "ok"
  exit CODE      exit with CODE (children are left running: the test cleans them up)
"""

import multiprocessing
import subprocess
import sys
import time

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
GRANDPARENT = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n",
]


def main() -> None:
    children: dict[int, object] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "spawn":
            p = subprocess.Popen(SLEEPER)
            children[p.pid] = p
            print(p.pid, flush=True)
        elif cmd == "spawn-mp":
            mp = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,))
            mp.start()
            children[mp.pid] = mp
            print(mp.pid, flush=True)
        elif cmd == "grandchild":
            p = subprocess.Popen(GRANDPARENT, stdout=subprocess.PIPE, text=True)
            children[p.pid] = p
            assert p.stdout is not None
            print(p.pid, p.stdout.readline().strip(), flush=True)
        elif cmd in ("kill", "kill-nowait"):
            c = children.pop(int(args[0]))
            c.terminate()  # type: ignore[attr-defined]
            if cmd == "kill":
                if isinstance(c, subprocess.Popen):
                    c.wait()
                else:
                    c.join()  # type: ignore[attr-defined]
            else:
                # keep a reference so nothing reaps it behind our back
                children[-int(args[0])] = c
            print("ok", flush=True)
        elif cmd == "exit":
            sys.stdout.flush()
            import os

            os._exit(int(args[0]))


if __name__ == "__main__":
    main()
