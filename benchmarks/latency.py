"""Speed and latency targets that used to be wall-clock assertions inside tests.

Tests assert behaviour (a stop does not wait out an hour-long interval; the exit does not wait
for a stuck server's 600 s timeout); how fast these are is measured here, as the median and the
spread (min .. max) of ``--repeats`` runs, against the goal each line names. Usage::

    python benchmarks/latency.py [--repeats 5] [--only NAME[,NAME...]]

Names: import, cli, process-cpu, stop-process, stop-gpu, stop-stacks, stop-agent, commit,
agent-exit, failure-headline, doctor.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent
WORKLOADS = HERE.parent / "tests" / "workloads"
SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))


def _stopped_in(run: Callable[[threading.Event], None], ready: Callable[[], bool]) -> float:
    """Start ``run(stop)`` in a thread, wait for ``ready()``, set stop: seconds to return."""
    stop = threading.Event()
    t = threading.Thread(target=run, args=(stop,), daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError("not ready within 60 s")
        time.sleep(0.01)
    t0 = time.monotonic()
    stop.set()
    t.join(60)
    return time.monotonic() - t0


def bench_import() -> float:
    """``import sofa_top.tui.app`` in a fresh interpreter (goal < 1.5 s)."""
    code = (
        "import time; t = time.perf_counter(); import sofa_top.tui.app; "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def bench_cli() -> float:
    """``sofa-top --version``, process start to exit (no goal yet; it imports torch today)."""
    t0 = time.monotonic()
    subprocess.run([SOFA_TOP, "--version"], capture_output=True, check=True)
    return time.monotonic() - t0


def bench_process_cpu() -> float:
    """The process collector's own CPU at 10 Hz on a 5-process tree, % of one core (goal < 10%)."""
    from sofa_top.collectors.process import ProcessCollector

    p = subprocess.Popen(
        [sys.executable, str(WORKLOADS / "proc_tree.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdin is not None and p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        for cmd in ("spawn", "spawn", "grandchild"):
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            p.stdout.readline()
        collector = ProcessCollector(p.pid, interval=0.1)
        stop = threading.Event()
        t = threading.Thread(target=collector.run, args=(lambda _s: None, stop), daemon=True)
        t.start()
        time.sleep(1.0)  # a measurement window, not a synchronisation
        cpu0, t0 = collector.self_cpu_seconds, time.monotonic()
        time.sleep(3.0)
        share = (collector.self_cpu_seconds - cpu0) / (time.monotonic() - t0)
        stop.set()
        t.join(10)
        return 100 * share
    finally:
        import psutil

        for child in psutil.Process(p.pid).children(recursive=True):
            child.kill()
        p.kill()
        p.wait()


def bench_stop_process() -> float:
    """ProcessCollector stop with an hour-long interval (goal < 1 s)."""
    from sofa_top.collectors.process import ProcessCollector

    samples: list[object] = []
    c = ProcessCollector(os.getpid(), interval=3600.0)
    return _stopped_in(lambda stop: c.run(samples.append, stop), lambda: bool(samples))


def bench_stop_gpu() -> float:
    """GpuCollector stop while waiting an hour to retry NVML (goal < 0.5 s)."""
    from sofa_top.collectors.gpu import GpuCollector, RecordedNvmlBackend

    backend = RecordedNvmlBackend(HERE.parent / "tests" / "data" / "nvml" / "no_devices.json")
    c = GpuCollector(lambda: set(), backend=backend, retry_interval=3600.0)
    samples: list[object] = []
    return _stopped_in(lambda stop: c.run(samples.append, stop), lambda: bool(samples))


def bench_stop_stacks() -> float:
    """StackCollector stop while py-spy records a long window (goal < 1 s)."""
    from sofa_top.collectors.stacks import StackCollector

    w = subprocess.Popen([sys.executable, str(WORKLOADS / "busy_python.py"), "600"])
    try:
        c = StackCollector(w.pid, window_s=600)
        spy = f"--pid\0{w.pid}\0"

        def spying() -> bool:
            for entry in os.listdir("/proc"):
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if argv.split(b"\0")[0].endswith(b"py-spy") and spy.encode() in argv:
                    return True
            return False

        return _stopped_in(lambda stop: c.run(lambda _s: None, stop), spying)
    finally:
        w.kill()
        w.wait()


def bench_stop_agent() -> float:
    """AgentCollector stop with a connected agent that never speaks (goal < 1 s)."""
    from sofa_top.collectors.agent import AgentCollector, AgentServer

    with tempfile.TemporaryDirectory() as d:
        server = AgentServer(Path(d))
        c = AgentCollector(server)
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        started = threading.Event()

        def run(stop: threading.Event) -> None:
            started.set()
            c.run(lambda _s: None, stop)

        def connected() -> bool:
            if not started.is_set():
                return False
            idle.connect(str(server.socket_path))
            return True

        try:
            return _stopped_in(run, connected)
        finally:
            idle.close()
            server.close()


def bench_commit() -> float:
    """The slowest store commit while a replay reads back to back (goal < 0.5 s; a commit
    blocked by the reader would wait out the 2 s busy timeout)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from synthetic_session import PID, T0, make_session

    from sofa_top.datamodel.samples import ProcessSample, ProcInfo, SystemSample
    from sofa_top.recording.replay import ReplaySource

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "live.sofa"
        store = make_session(path, seconds=3, close=False)
        r = ReplaySource(path)
        r.interval = 0.0
        r.start(lambda _s: None)
        slowest = 0.0
        try:
            for k in range(40):
                ts = T0 + 3 + k * 0.1
                info = ProcInfo(
                    PID, 1, "python", ("python",), T0 - 5, 1.0, 1, 1, 0, 0, 0, "running"
                )
                t = time.monotonic()
                store.write(
                    [
                        ProcessSample(ts, PID, True, (info,), 500.0 + k, 1 << 20, 0, 0, 3),
                        SystemSample(ts, (1.0,), 1.0, 0.0, 1, 2, 0, 0),
                    ]
                )
                store.commit()
                slowest = max(slowest, time.monotonic() - t)
                time.sleep(0.01)
        finally:
            r.stop()
            store.close()
        return slowest


def bench_agent_exit() -> float:
    """A flooding workload's exit with a server that accepts but never reads: seconds from
    its last step to its exit (goal < exit_flush_s 0.5 + 1.5 s)."""
    from sofa_top.agent.launch_env import agent_env

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "stuck.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(1)
        settings = {"exit_flush_s": 0.5, "send_timeout_s": 600, "queue_max": 10**6}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(agent_env(path, settings, base=env))
        try:
            proc = subprocess.run(
                [sys.executable, str(WORKLOADS / "agent_plain.py"), "--flood", "300000"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            ended = time.time()
        finally:
            listener.close()
        return ended - float(proc.stdout.split("FLOOD_DONE_AT=")[1].split()[0])


def bench_failure_headline() -> float:
    """A launched workload that fails at import: seconds from its last line to the first
    snapshot whose verdict names its error (goal < 1 s; the dashboard draws that snapshot at
    once, ``tests/test_lifecycle_tmux.py``)."""
    from sofa_top.datamodel.snapshot import Snapshot
    from sofa_top.launch import LaunchRequest, Sampling, open_launch

    with tempfile.TemporaryDirectory() as d:
        died = Path(d) / "died"
        code = (
            "import pathlib, time\ntime.sleep(1)\n"
            f"pathlib.Path({str(died)!r}).write_text(repr(time.time()))\n"
            "import no_such_module_sofa_top\n"
        )
        run = open_launch(
            LaunchRequest(
                cmd=(sys.executable, "-c", code),
                output=str(Path(d) / "f.sofa"),
                sampling=Sampling(),
            )
        )
        seen: list[float] = []

        def on_snapshot(s: Snapshot) -> None:
            if not seen and s.verdict is not None and "ModuleNotFoundError" in s.verdict.headline:
                seen.append(time.time())

        run.start(on_snapshot)
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        run.finish("done")
        if not seen:
            raise RuntimeError("no snapshot named the error within 60 s")
        return seen[0] - float(died.read_text())


def bench_doctor() -> float:
    """A full ``sofa-top doctor`` (goal < 60 s; it imports torch and tensorflow)."""
    t0 = time.monotonic()
    subprocess.run([SOFA_TOP, "doctor"], capture_output=True, check=False)
    return time.monotonic() - t0


BENCHES: dict[str, tuple[Callable[[], float], str]] = {
    "import": (bench_import, "s"),
    "cli": (bench_cli, "s"),
    "process-cpu": (bench_process_cpu, "% of a core"),
    "stop-process": (bench_stop_process, "s"),
    "stop-gpu": (bench_stop_gpu, "s"),
    "stop-stacks": (bench_stop_stacks, "s"),
    "stop-agent": (bench_stop_agent, "s"),
    "commit": (bench_commit, "s"),
    "agent-exit": (bench_agent_exit, "s"),
    "failure-headline": (bench_failure_headline, "s"),
    "doctor": (bench_doctor, "s"),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--only", default=",".join(BENCHES))
    a = p.parse_args()
    names = [n for n in a.only.split(",") if n]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        p.error(f"unknown: {', '.join(unknown)}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    for name in names:
        fn, unit = BENCHES[name]
        values = [fn() for _ in range(a.repeats)]
        first = (fn.__doc__ or "").split("\n")[0]
        print(
            f"{name:16s} median {statistics.median(values):8.3f} {unit}"
            f"  ({min(values):.3f} .. {max(values):.3f}, n={len(values)})  {first}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
