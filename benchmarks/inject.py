"""What injecting the agent costs the target (``sofa-top attach`` / ``record --pid``).

1. **Pause**: a target runs small fixed chunks of work and logs when each ended
   (``inject_target.py``); the agent is injected (thread choice, injector, bootstrap, hook
   installation: sofa-top's ``inject`` plus the agent's first frames), and the pause is the
   time the chunks took beyond their median, summed from the injection's start until the
   agent reported its hooks, plus 0.5 s, less the same sum over as long a window just before
   (the shared machine's own noise); also the longest single chunk over the median. On a busy
   machine that is noisy, so the bound the target's Python can lose is printed too: the time
   the injector holds it plus the bootstrap thread's own CPU time (the most it can have held
   the GIL for: imports, hook installation, the mid-run adoption).
2. **Overhead**: paired runs of ``bench_workload.py`` (fixed work, timed by the workload):
   plain, under the launch-mode agent, and with the agent injected during its warm-up
   (A B C A B C ...); the slowdowns vs plain in wall time and in the process's CPU time (the
   agent's thread included; far less moved by other jobs on a shared machine), median and
   spread.

No py-spy in either (``inject`` and the agent connection only), so the numbers are the
agent's. Usage::

    python benchmarks/inject.py [--repeats 7] [--pairs 5] [--kinds python,torch]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from overhead import WORKLOAD, _elapsed, summarize

from sofa_top.collectors.agent import AgentCollector, AgentServer
from sofa_top.collectors.inject import inject
from sofa_top.datamodel.samples import Event, Sample

HERE = Path(__file__).parent
TARGET = HERE / "inject_target.py"


class _Attached:
    """An injected agent served by a real AgentCollector; ``hooked`` once the agent said its
    hooks are installed (its "hooks installed in N ms" event, after the mid-run adoption)."""

    def __init__(self, pid: int) -> None:
        self.server = AgentServer()
        self.hooked = threading.Event()
        self.stop = threading.Event()
        self.result = inject(pid, self.server)
        self.thread: threading.Thread | None = None
        self.install_ms = self.bootstrap_cpu_ms = float("nan")
        if self.result.handshake is not None:
            collector = AgentCollector(self.server, handshake=self.result.handshake)
            self.thread = threading.Thread(target=collector.run, args=(self.emit, self.stop))
            self.thread.start()

    def emit(self, s: Sample) -> None:
        if isinstance(s, Event) and "install_s" in s.data:
            self.install_ms = float(s.data["install_s"]) * 1e3  # type: ignore[arg-type]
            self.bootstrap_cpu_ms = float(s.data["bootstrap_cpu_s"]) * 1e3  # type: ignore[arg-type]
            self.hooked.set()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(10)
        self.server.close()


def one_pause(kind: str, tmp: Path) -> tuple[float, float, float, float, float]:
    """(summed excess ms, longest chunk over the median ms, injector ms, the agent's own hook
    installation ms, the bootstrap thread's CPU ms) of one injection."""
    out, stop = tmp / "ends.json", tmp / "stop"
    stop.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, str(TARGET), kind, str(out), "--stop", str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith("READY")
    time.sleep(3.0)  # chunks before the injection: the median and the control window
    t0 = time.monotonic()
    attached = _Attached(proc.pid)
    if attached.result.status != "injected":
        raise SystemExit(f"not injected: {attached.result.reason}")
    if not attached.hooked.wait(10):
        raise SystemExit("the agent never said its hooks are installed")
    t1 = time.monotonic() + 0.5
    time.sleep(1.5)
    stop.touch()
    proc.wait(60)
    attached.close()
    ends = json.loads(out.read_text())
    chunks = [(b, b - a) for a, b in itertools.pairwise(ends)]
    med = statistics.median(d for _, d in chunks)
    window = [d for end, d in chunks if t0 <= end <= t1 + med]
    # the same length of time just before: what this (shared) machine's noise costs alone
    control = [d for end, d in chunks if t0 - (t1 - t0) - 0.1 <= end < t0 - 0.1]
    excess = sum(max(0.0, d - med) for d in window) - sum(max(0.0, d - med) for d in control)
    longest = max((d - med for d in window), default=0.0)
    injector = (attached.result.injector_s or 0.0) * 1e3
    return excess * 1e3, longest * 1e3, injector, attached.install_ms, attached.bootstrap_cpu_ms


def _times(out: str) -> tuple[float, float]:
    cpu = next(float(line.split()[1]) for line in out.splitlines() if line.startswith("CPU "))
    return _elapsed(out), cpu


def run_plain(kind: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """The workload alone: (wall s, process CPU s) of its fixed work."""
    p = subprocess.run(
        [sys.executable, str(WORKLOAD), kind], capture_output=True, text=True, env=env, check=True
    )
    return _times(p.stdout)


def run_with_agent(kind: str) -> tuple[float, float]:
    """The workload under the launch-mode agent and a live agent server."""
    from sofa_top.agent.launch_env import agent_env

    server = AgentServer()
    stop = threading.Event()
    t = threading.Thread(target=AgentCollector(server).run, args=(lambda s: None, stop))
    t.start()
    try:
        return run_plain(kind, {**os.environ, **agent_env(server.socket_path, {})})
    finally:
        stop.set()
        t.join(5)
        server.close()


def run_injected(kind: str) -> tuple[float, float]:
    """The fixed-work workload with the agent injected during its warm-up."""
    w = subprocess.Popen([sys.executable, str(WORKLOAD), kind], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # inside the 3 s warm-up, before the timed work starts
    attached = _Attached(w.pid)
    try:
        out, _ = w.communicate()
    finally:
        attached.close()
    if attached.result.status != "injected":
        raise SystemExit(f"not injected: {attached.result.reason}")
    return _times(out)


def spread(name: str, values: list[float]) -> str:
    return (
        f"{name:<34} median {statistics.median(values):7.1f} ms "
        f"(min {min(values):.1f}, max {max(values):.1f}, n={len(values)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--kinds", default="python,torch")
    args = ap.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(",") if args.repeats > 0 else ():
            pauses = [one_pause(kind, Path(tmp)) for _ in range(args.repeats)]
            for i, (ex, lo, inj, hooks, cpu) in enumerate(pauses):
                print(f"{kind} injection {i + 1}: pause {ex:.1f} ms (longest {lo:.1f} ms), "
                      f"injector {inj:.1f} ms, bootstrap CPU {cpu:.1f} ms, hooks {hooks:.1f} ms",
                      flush=True)  # fmt: skip
            lines.append(spread(f"pause, total ({kind})", [p[0] for p in pauses]))
            lines.append(spread(f"pause, longest chunk ({kind})", [p[1] for p in pauses]))
            lines.append(spread(f"injector holds the target ({kind})", [p[2] for p in pauses]))
            lines.append(spread(f"hook installation ({kind})", [p[3] for p in pauses]))
            lines.append(spread(f"bootstrap thread CPU ({kind})", [p[4] for p in pauses]))
            bound = [p[2] + p[4] for p in pauses]
            lines.append(spread(f"injector + bootstrap CPU ({kind})", bound))
        for kind in args.kinds.split(",") if args.pairs > 0 else ():
            ratios: dict[str, list[float]] = {}
            for i in range(args.pairs):
                base, la, at = run_plain(kind), run_with_agent(kind), run_injected(kind)
                for what, j in (("wall", 0), ("CPU", 1)):
                    ratios.setdefault(f"launch agent, {what} ({kind})", []).append(la[j] / base[j])
                    ratios.setdefault(f"injected agent, {what} ({kind})", []).append(
                        at[j] / base[j]
                    )
                print(f"{kind} triple {i + 1}: wall/CPU s plain {base[0]:.3f}/{base[1]:.3f} "
                      f"launch-agent {la[0]:.3f}/{la[1]:.3f} injected {at[0]:.3f}/{at[1]:.3f}",
                      flush=True)  # fmt: skip
            lines += [summarize(name, r) for name, r in ratios.items()]
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
