"""Fault matrix, agent side: the in-process agent of ``sofa-top launch`` never hurts the
workload, and sofa-top's socket survives hostile peers and lets only its own user in."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from other_uid import OtherUser
from procs import child_running

from faults.conftest import (
    NOBODY,
    WORKLOADS,
    KilledMidRun,
    no_traceback,
    sofa,
    start_sofa,
    wait_until,
)
from sofa_top.agent.launch_env import agent_env
from sofa_top.agent.protocol import MAX_FRAME, STEP_FIELDS, encode
from sofa_top.collectors.agent import AgentServer
from sofa_top.recording.reader import SessionReader
from sofa_top.recording.report import session_summary

AGENT_PLAIN = [sys.executable, str(WORKLOADS / "agent_plain.py")]
N = len(STEP_FIELDS)


def _keys(stdout: str) -> list[str]:
    """The workload's result lines without their (timing-dependent) values."""
    return [line.split("=", 1)[0] for line in stdout.splitlines()]


def test_socket_gone_before_the_agent_connects() -> None:
    """sofa-top's socket (and its directory) vanished before the workload started: the agent
    says so in one line and stays off; the workload's output and exit code are its own."""
    with tempfile.TemporaryDirectory(dir="/tmp") as base:
        server = AgentServer(Path(base))
        gone = server.socket_path
        server.close()
        assert not gone.exists() and not gone.parent.exists()
        cmd = [*AGENT_PLAIN, "--steps", "20", "--input-ms", "1", "--compute-ms", "1"]
        cmd += ["--exit-code", "3"]
        plain = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        env = {**os.environ, **agent_env(gone, {})}
        agent = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert plain.returncode == agent.returncode == 3
    assert _keys(agent.stdout) == _keys(plain.stdout)
    assert "AGENT_ACTIVE=0" in agent.stdout
    (line,) = agent.stderr.strip().splitlines()
    assert line.startswith("sofa-top agent: cannot reach sofa-top at ") and str(gone) in line


def test_sofa_top_dies_mid_run_the_workload_finishes(killed_mid_run: KilledMidRun) -> None:
    """SIGKILL of sofa-top while the agent streams steps: the workload runs all its steps
    (the agent switched itself off), prints its result, and exits with its own code."""
    assert killed_mid_run.exit_code == 4
    assert _keys(killed_mid_run.stdout) == [
        "AGENT_ACTIVE",
        "SELF_STEPS_PER_S",
        "SELF_INPUT_FRACTION",
    ]
    assert "AGENT_ACTIVE=0" in killed_mid_run.stdout  # off since sofa-top went away
    assert SessionReader(killed_mid_run.session).count_steps() < 250  # killed before the end


@dataclass
class Flood:
    proc: subprocess.CompletedProcess[str]
    session: Path


FLOOD = 200_000


@pytest.fixture(scope="module")
def flood(tmp_path_factory: pytest.TempPathFactory) -> Flood:
    """``sofa-top record -- agent_plain.py --flood 200000``: empty steps as fast as can be."""
    out = tmp_path_factory.mktemp("flood") / "flood.sofa"
    proc = sofa("record", "-o", str(out), "--", *AGENT_PLAIN, "--flood", str(FLOOD))
    return Flood(proc, out)


def test_agent_queue_overflow_is_counted_and_shown(flood: Flood) -> None:
    """The agent's queue overflows; the workload still runs every step (the agent never
    blocks it); the drops are counted, never double-counted, and the summary shows them."""
    assert flood.proc.returncode == 0, flood.proc.stderr
    no_traceback(flood.proc.stdout, flood.proc.stderr)
    summary = session_summary(flood.session)
    assert summary["exit_code"] == 0  # the workload ran all its steps
    agent_dropped = summary["steps"]["dropped"]
    assert agent_dropped > 0
    assert summary["steps"]["count"] + agent_dropped <= FLOOD
    text = " ".join(flood.proc.stdout.split())  # rich wraps long lines
    assert f"{agent_dropped} steps dropped by the agent" in text, flood.proc.stdout
    hub_dropped = summary["dropped_samples"]
    assert hub_dropped == int(SessionReader(flood.session).meta().get("dropped_samples", 0))
    if hub_dropped:
        assert f"{hub_dropped} samples dropped by sofa-top" in text, flood.proc.stdout


def test_agent_flood_costs_only_the_agents_counted_drops(flood: Flood) -> None:
    """sofa-top's own writer drops nothing under a step flood, so every step is accounted for:
    in the session, or in the agent's final count."""
    r = SessionReader(flood.session)
    assert int(r.meta().get("dropped_samples", 0)) == 0
    (bye,) = r.events("agent-exit")
    assert r.count_steps() + int(str(bye.data["dropped"])) == FLOOD


# -- a running sofa-top, poked from outside ---------------------------------------------------


@dataclass
class Live:
    rec: subprocess.Popen[str]
    session: Path
    socket: Path
    workload: int


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """``sofa-top record -- agent_plain.py`` with a workload that steps until stopped."""
    out = tmp_path_factory.mktemp("live") / "live.sofa"
    cmd = [*AGENT_PLAIN, "--steps", "1000000", "--input-ms", "0", "--compute-ms", "2"]
    rec = start_sofa("record", "-o", str(out), "--", *cmd)
    try:

        def steps() -> int:
            try:
                return SessionReader(out).count_steps()
            except Exception:
                return 0

        wait_until(lambda: steps() >= 20, 60, "the first steps")
        child = child_running(rec.pid, "agent_plain.py")
        sock = Path(child.environ()["SOFA_TOP_SOCKET"])
        yield Live(rec, out, sock, child.pid)
    finally:
        rec.send_signal(signal.SIGINT)
        rec.communicate(timeout=30)


def _steps(path: Path) -> int:
    try:
        return SessionReader(path).count_steps()
    except Exception:  # not created or initialised yet
        return 0


def _events(path: Path, kind: str) -> list[str]:
    return [e.message for e in SessionReader(path).events(kind)]


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(path))
    return s


GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=2000),  # no framing at all
    st.binary(min_size=1, max_size=2000).map(lambda b: struct.pack(">I", len(b)) + b),  # framed
    st.binary(max_size=64).map(lambda b: struct.pack(">I", MAX_FRAME + 1) + b),  # oversized
    st.integers(1, 500).map(lambda n: struct.pack(">I", n + 1) + b"{" * n),  # truncated
)


def test_garbage_frames_drop_the_peer_not_sofa_top(live: Live) -> None:
    """Fuzzed garbage, truncated and oversized frames on the real socket: each such peer is
    dropped with its reason in the session; sofa-top and the real agent carry on."""
    before = len(_events(live.session, "agent-protocol-error"))
    steps_before = SessionReader(live.session).count_steps()
    sent = 0

    @settings(
        max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(GARBAGE)
    @example(struct.pack(">I", 0xFFFFFFFF))
    @example(struct.pack(">I", 100) + b'{"type": "ev')
    @example(struct.pack(">I", 5) + b"hello")
    @example(encode({"type": "steps", "source": "s", "data": [1, 2, 1, 0] + [None] * (N - 4)}))
    def send(payload: bytes) -> None:
        nonlocal sent
        with _connect(live.socket) as s:
            s.sendall(payload)
        sent += 1

    send()
    wait_until(
        lambda: len(_events(live.session, "agent-protocol-error")) - before >= 0.9 * sent,
        30,
        f"a protocol error for (almost) each of {sent} bad peers",
    )
    reasons = " ".join(_events(live.session, "agent-protocol-error"))
    for reason in ("oversized", "truncated", "not JSON", "ends before it starts"):
        assert reason in reasons
    assert live.rec.poll() is None  # sofa-top runs on
    wait_until(
        lambda: SessionReader(live.session).count_steps() > steps_before + 50,
        30,
        "the real agent's steps to keep arriving",
    )


def test_frame_with_a_lone_surrogate_drops_only_that_peer(tmp_path: Path) -> None:
    """Valid JSON, invalid text: one peer's frame must not end everybody's recording."""
    out = tmp_path / "s.sofa"
    cmd = [*AGENT_PLAIN, "--steps", "1000000", "--input-ms", "0", "--compute-ms", "2"]
    rec = start_sofa("record", "-o", str(out), "--", *cmd)
    workload: psutil.Process | None = None
    try:
        wait_until(lambda: _steps(out) >= 20, 60, "the first steps")
        workload = child_running(rec.pid, "agent_plain.py")
        data = [1, 10**6, 2 * 10**6, 0, *[None] * (N - 4)]
        frame = {"type": "steps", "source": "\ud800", "data": data}
        body = json.dumps(frame).encode()  # ASCII: the surrogate travels as an escape
        with _connect(Path(workload.environ()["SOFA_TOP_SOCKET"])) as s:
            s.sendall(struct.pack(">I", len(body)) + body)
        wait_until(
            lambda: rec.poll() is not None or bool(_events(out, "agent-protocol-error")),
            30,
            "sofa-top to drop the peer (or to fail)",
        )
        assert rec.poll() is None, rec.communicate()[1]  # still recording
        n = _steps(out)
        wait_until(lambda: _steps(out) > n + 50, 30, "steps to keep arriving")
    finally:
        if rec.poll() is None:
            rec.send_signal(signal.SIGINT)
        rec.communicate(timeout=30)
        if workload is not None and workload.is_running():
            workload.kill()  # left running by a failed sofa-top


CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except PermissionError:
    sys.exit(13)  # the 0700 directory keeps us out
sys.exit(0 if s.recv(1) == b"" else 4)  # 0: accepted, then closed by sofa-top
"""


def test_connection_from_another_uid_is_refused(live: Live, nobody: OtherUser) -> None:
    """Another user cannot reach the socket (0700 directory); with the directory opened up,
    sofa-top still refuses the peer by its credentials and records who it was."""
    connect = nobody.python_argv("-c", CONNECT, str(live.socket))
    env = nobody.env()
    assert subprocess.run(connect, timeout=30, env=env).returncode == 13
    directory = live.socket.parent
    os.chmod(directory, 0o711)
    os.chmod(live.socket, 0o777)
    try:
        assert subprocess.run(connect, timeout=30, env=env).returncode == 0
    finally:
        os.chmod(directory, 0o700)
    wait_until(
        lambda: any(f"uid {NOBODY}" in m for m in _events(live.session, "agent-refused")),
        10,
        "the refusal in the session",
    )
    assert live.rec.poll() is None


def test_no_network_port_is_opened(live: Live) -> None:
    """sofa-top, its py-spy and the agent in the workload hold no TCP/UDP socket at all; the
    agent's Unix socket is in a directory only its user can enter."""
    procs = [psutil.Process(live.rec.pid), *psutil.Process(live.rec.pid).children(recursive=True)]
    assert any(p.pid == live.workload for p in procs)
    for p in procs:
        try:
            assert p.net_connections(kind="inet") == [], p.cmdline()
        except psutil.NoSuchProcess:  # a py-spy window ended meanwhile
            continue
    directory = live.socket.parent.stat()
    assert stat.S_IMODE(directory.st_mode) == 0o700 and directory.st_uid == os.getuid()
    listening = psutil.Process(live.rec.pid).net_connections(kind="unix")
    assert str(live.socket) in {str(c.laddr) for c in listening}
