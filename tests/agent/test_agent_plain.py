"""The injected agent end to end with a stdlib-only workload: accuracy and robustness."""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_harness import (
    ROOT,
    LiveServer,
    base_env,
    classify,
    run_cmd,
    run_with_agent,
    workload_cmd,
)

from sofa_top.agent.launch_env import agent_env
from sofa_top.datamodel.samples import AgentInfo, Event, StepSample

PLAIN = "agent_plain.py"
WARMUP = 2


def agent_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("sofa-top agent:")]


@pytest.mark.parametrize(
    ("input_ms", "compute_ms", "expected"),
    # compute: batches in memory (a 0.2 ms sleep woke late enough on a busy machine to make
    # the loop input-bound by its own measure)
    [(15.0, 5.0, "input"), (0.0, 15.0, "compute")],
)
def test_plain_loop_fraction_matches_the_workloads_own(
    input_ms: float, compute_ms: float, expected: str
) -> None:
    run = run_with_agent(
        workload_cmd(
            PLAIN, "--steps", "40", "--input-ms", str(input_ms), "--compute-ms", str(compute_ms)
        )
    )
    assert run.returncode == 0, run.summary()
    assert run.value("AGENT_ACTIVE") == 1
    own = run.value("SELF_INPUT_FRACTION")
    seen = run.agent_fraction("python", WARMUP)
    assert abs(seen - own) <= 0.10, (seen, own)
    assert classify(seen) == classify(own) == expected
    steps = run.steps("python")
    assert [s.step for s in steps] == list(range(WARMUP + 40))
    assert all(s.batch_size == 1 and s.pid > 0 for s in steps)
    # steps tile the loop: each starts where the previous one ended
    assert all(abs(b.start - a.ts) < 1e-6 for a, b in itertools.pairwise(steps))
    (info, *_) = run.infos()
    assert info.hooks_applied == ()
    assert dict(info.hooks_skipped)["torch-dataloader"] == "not imported by the workload"
    assert run.events("agent-exit")


def test_optimize_settings_are_parsed_and_reported() -> None:
    run = run_with_agent(
        workload_cmd(PLAIN, "--steps", "3", "--input-ms", "1", "--compute-ms", "1"),
        settings={"optimize": {"prefetch": {"parallelism": 4}}, "flush_interval_s": 0.05},
    )
    assert run.returncode == 0, run.summary()
    (hello,) = run.events("agent-connected")
    settings = hello.data["settings"]
    assert isinstance(settings, dict)
    assert settings["optimize"] == {"prefetch": {"parallelism": 4}}
    assert settings["flush_interval_s"] == 0.05


def test_socket_missing_at_start_changes_nothing(tmp_path: Path) -> None:
    cmd = workload_cmd(PLAIN, "--steps", "5", "--input-ms", "1", "--compute-ms", "1")
    plain, _ = run_cmd(cmd, base_env())
    env = base_env()
    env.update(agent_env(tmp_path / "no-such.sock", {}, base=env))
    injected, wall = run_cmd(cmd, env)
    assert injected.returncode == plain.returncode == 0
    strip = [ln for ln in injected.stdout.splitlines() if not ln.startswith("SELF_")]
    assert strip == [ln for ln in plain.stdout.splitlines() if not ln.startswith("SELF_")]
    assert "AGENT_ACTIVE=0" in injected.stdout
    lines = agent_lines(injected.stderr)
    assert len(lines) == 1 and "running without telemetry" in lines[0]
    assert injected.stderr.strip() == lines[0]
    assert wall < 30  # no waiting for a sofa-top that is not there (5 steps of 2 ms)


@pytest.mark.parametrize("exit_code", [0, 3])
def test_server_stopped_mid_run(exit_code: int) -> None:
    cmd = workload_cmd(
        PLAIN,
        "--steps",
        "150",
        "--input-ms",
        "5",
        "--compute-ms",
        "5",
        "--exit-code",
        str(exit_code),
    )
    with LiveServer() as live:
        env = base_env()
        env.update(agent_env(live.socket_path, {}, base=env))
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert live.wait_for(lambda ss: sum(isinstance(s, StepSample) for s in ss) >= 20, 60)
        live.stop()  # sofa-top goes away while the workload runs on
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == exit_code
    assert "SELF_INPUT_FRACTION=" in out
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert agent_lines(err) == []


def test_server_killed_mid_run(tmp_path: Path) -> None:
    """sofa-top's process dies (SIGKILL): the workload finishes with its own exit code."""
    server_code = (
        "import sys, threading\n"
        "from sofa_top.collectors.agent import AgentServer, AgentCollector\n"
        "srv = AgentServer()\n"
        "print(srv.socket_path, flush=True)\n"
        "n = [0]\n"
        "def emit(s):\n"
        "    n[0] += 1\n"
        "    if n[0] == 20: print('GOT20', flush=True)\n"
        "AgentCollector(srv).run(emit, threading.Event())\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", server_code], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert server.stdout is not None
        sock_path = server.stdout.readline().strip()
        env = base_env()
        env.update(agent_env(sock_path, {}, base=env))
        cmd = workload_cmd(
            PLAIN, "--steps", "150", "--input-ms", "5", "--compute-ms", "5", "--exit-code", "5"
        )
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert server.stdout.readline().strip() == "GOT20"
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        out, err = proc.communicate(timeout=60)
    finally:
        server.kill()
        server.wait()
    assert proc.returncode == 5
    assert "SELF_INPUT_FRACTION=" in out
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_stuck_server_does_not_hold_the_exit(tmp_path: Path) -> None:
    """A server that accepts but never reads: the flood fills the socket; exit is not held."""
    path = tmp_path / "stuck.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    settings = {"exit_flush_s": 0.5, "send_timeout_s": 600, "queue_max": 10**6}
    try:
        env = base_env()
        env.update(agent_env(path, settings, base=env))
        proc = subprocess.run(
            workload_cmd(PLAIN, "--flood", "300000"), env=env, capture_output=True, text=True
        )
        ended = time.time()
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr
    assert "FLOOD_STEPS=300000" in proc.stdout
    assert "Traceback" not in proc.stderr
    done_at = float(proc.stdout.split("FLOOD_DONE_AT=")[1].split()[0])
    # the send is stuck (600 s timeout) yet the exit waits only exit_flush_s, plus teardown
    assert ended - done_at < 60, ended - done_at


@pytest.mark.parametrize(("args", "code"), [(["--crash"], 1), (["--exit-code", "7"], 7)])
def test_workload_exit_code_is_kept(args: list[str], code: int) -> None:
    run = run_with_agent(
        workload_cmd(PLAIN, "--steps", "5", "--input-ms", "1", "--compute-ms", "1", *args)
    )
    assert run.returncode == code, run.summary()
    assert "SELF_INPUT_FRACTION=" in run.stdout
    if "--crash" in args:
        assert "RuntimeError: workload crashed on purpose" in run.stderr
    assert agent_lines(run.stderr) == []
    # even a crashing workload's last steps arrive (sent at exit)
    assert len(run.steps("python")) == 5 + WARMUP
    assert run.events("agent-exit")


def _interpreters() -> list[object]:
    """This Python, plus an older and a newer one when pyenv has them (else skipped)."""
    found = {
        p.parent.parent.name: p
        for p in sorted((Path.home() / ".pyenv" / "versions").glob("3.*/bin/python3"))
    }
    out: list[object] = [pytest.param(sys.executable, id="this-python")]
    for want in ("3.8", "3.13"):
        match = [p for name, p in found.items() if name.startswith(want + ".")]
        out.append(
            pytest.param(
                str(match[-1]) if match else "",
                id=f"python{want}",
                marks=pytest.mark.skipif(not match, reason=f"no Python {want} here"),
            )
        )
    return out


@pytest.mark.parametrize("base_python", _interpreters())
def test_other_virtualenv_without_sofa_top(tmp_path: Path, base_python: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    probe = subprocess.run(
        [
            py,
            "-c",
            "import importlib.util as u; print(u.find_spec('sofa_top'), u.find_spec('psutil'))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=base_env(),
        cwd=tmp_path,
    )
    assert probe.stdout.split() == ["None", "None"]  # really another environment
    run = run_with_agent(
        workload_cmd(PLAIN, "--steps", "20", "--input-ms", "10", "--compute-ms", "5", python=py)
    )
    assert run.returncode == 0, run.summary()
    assert run.value("AGENT_ACTIVE") == 1
    own = run.value("SELF_INPUT_FRACTION")
    assert abs(run.agent_fraction("python", WARMUP) - own) <= 0.10
    (hello,) = run.events("agent-connected")
    assert hello.data["argv"] == [
        str(ROOT / "tests" / "workloads" / PLAIN),
        "--steps",
        "20",
        "--input-ms",
        "10",
        "--compute-ms",
        "5",
    ]
    # the agent made sofa_top.agent importable without exposing sofa-top's site-packages
    env = base_env()
    with LiveServer() as live:
        env.update(agent_env(live.socket_path, {}, base=env))
        check, _ = run_cmd(
            [
                py,
                "-c",
                "import importlib.util as u, sofa_top.agent.api as a;"
                "print(a.active(), u.find_spec('psutil'))",
            ],
            env,
        )
    assert check.stdout.split() == ["True", "None"], check.stderr


def test_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\nMARK = 'user'\n"
    )
    code = (
        "import os, sitecustomize, sys\n"
        "from sofa_top.agent import api\n"
        "print(os.environ.get('USER_SITECUSTOMIZE'), sitecustomize.MARK, api.active())\n"
        # the inject directory itself (a folder named like "wt-inject" above it is no match)
        "print(any(p.rstrip('/').endswith('agent/inject') for p in sys.path))\n"
    )
    with LiveServer() as live:
        env = base_env({"PYTHONPATH": str(site)})
        env.update(agent_env(live.socket_path, {}, base=env))
        proc, _ = run_cmd([sys.executable, "-c", code], env)
        live.wait_settled()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran", "user", "True", "False"]


def test_failing_sitecustomize_is_reported_like_python_does(tmp_path: Path) -> None:
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("raise ValueError('boom')\n")
    env = base_env({"PYTHONPATH": str(site)})
    without, _ = run_cmd([sys.executable, "-c", "print('ok')"], env)
    with LiveServer() as live:
        env.update(agent_env(live.socket_path, {}, base=env))
        proc, _ = run_cmd(
            [sys.executable, "-c", "from sofa_top.agent import api; print('ok', api.active())"], env
        )
    assert proc.returncode == 0
    assert proc.stdout.split() == ["ok", "True"]
    assert "ValueError: boom" in without.stderr
    assert "Error in sitecustomize" in proc.stderr and "ValueError: boom" in proc.stderr


def test_queue_overflow_counts_every_dropped_step() -> None:
    flood = 200_000
    run = run_with_agent(
        workload_cmd(PLAIN, "--flood", str(flood)),
        settings={"queue_max": 100, "flush_interval_s": 0.2},
    )
    assert run.returncode == 0, run.summary()
    received = len(run.steps("flood"))
    dropped = max(i.dropped for i in run.infos())
    (bye,) = run.events("agent-exit")
    assert dropped > 0
    assert bye.data["dropped"] == dropped
    assert received + dropped == flood  # nothing lost without being counted
    # (how many get through depends on how often the drain thread gets the GIL mid-flood:
    # it keeps sending while records keep arriving, so no count bound holds here)


def test_forked_child_stays_silent() -> None:
    code = (
        "import os, sys\n"
        "from sofa_top.agent import api\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    for _ in api.iterate(range(50), source='child'): pass\n"
        "    os._exit(0 if not api.active() else 9)\n"
        "os.waitpid(pid, 0)\n"
        "for _ in api.iterate(range(10), source='parent'): pass\n"
    )
    run = run_with_agent([sys.executable, "-c", code])
    assert run.returncode == 0, run.summary()
    assert run.steps("child") == []
    assert len(run.steps("parent")) == 10


def test_agent_info_is_an_agent_info() -> None:
    run = run_with_agent(
        workload_cmd(PLAIN, "--steps", "2", "--input-ms", "1", "--compute-ms", "1")
    )
    assert all(isinstance(i, AgentInfo) and i.python == sys.version.split()[0] for i in run.infos())
    assert all(isinstance(e, Event) for e in run.events("agent-connected", "agent-exit"))
