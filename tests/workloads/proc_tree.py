"""Workload: a parent that starts and stops children on command, for the process collector.

Prints "ready", then reads one command per line from stdin and answers one line each:
  spawn          start a sleeping Python child; answers its PID
  spawn-mp       start a multiprocessing "spawn" child; answers its PID
  grandchild     start a child that starts its own child; answers "<child> <grandchild>"
  kill PID       terminate a child and reap it; answers "ok"
  kill-nowait P  terminate a child without reaping it (it stays a zombie); answers "ok"
  exit CODE      exit with CODE at once, no answer (children are left running: the test
                 cleans them up; multiprocessing children still hold stdout open)
"""

import multiprocessing
import os
import subprocess
import sys
import time
from typing import Any

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
GRANDPARENT = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
    "                     stdout=subprocess.DEVNULL)\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n",
]


def main() -> None:
    children: dict[int, subprocess.Popen[Any]] = {}
    mp_children: dict[int, multiprocessing.process.BaseProcess] = {}
    zombies: list[subprocess.Popen[Any]] = []  # referenced so that nothing reaps them
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "spawn":
            p = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            children[p.pid] = p
            print(p.pid, flush=True)
        elif cmd == "spawn-mp":
            mp = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,))
            mp.start()
            assert mp.pid is not None
            mp_children[mp.pid] = mp
            print(mp.pid, flush=True)
        elif cmd == "grandchild":
            g = subprocess.Popen(
                GRANDPARENT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
            )
            children[g.pid] = g
            assert g.stdout is not None
            print(g.pid, g.stdout.readline().strip(), flush=True)
        elif cmd == "kill":
            pid = int(args[0])
            if pid in mp_children:
                mp_children.pop(pid).terminate()
                os.waitpid(pid, 0)
            else:
                c = children.pop(pid)
                c.terminate()
                c.wait()
            print("ok", flush=True)
        elif cmd == "kill-nowait":
            pid = int(args[0])
            c = children.pop(pid)
            c.terminate()
            zombies.append(c)
            print("ok", flush=True)
        elif cmd == "exit":
            # os._exit: no atexit joining of multiprocessing children, they are left behind
            os._exit(int(args[0]))


if __name__ == "__main__":
    main()
