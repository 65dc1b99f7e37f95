"""The agent server: private socket, peer credentials, hostile or broken peers, shutdown."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from agent_harness import LiveServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sofa_top.agent.protocol import MAX_FRAME, encode
from sofa_top.collectors.agent import AgentCollector, AgentServer
from sofa_top.datamodel.samples import Event, Sample, StepSample

NOBODY = 65534
_step_ids = itertools.count(1_000_000)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path) as srv:
        yield srv


def connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(path))
    return s


def good_peer_is_served(live: LiveServer) -> bool:
    """A well-behaved agent connects, sends a step, and sofa-top gets it."""
    step = next(_step_ids)
    with connect(live.socket_path) as s:
        s.sendall(
            encode({"type": "hello", "v": 2, "pid": os.getpid(), "t": time.time()})
            + encode({"type": "steps", "source": "test", "data": [step, 1, 2, 0, 4, 0]})
        )
        return live.wait_for(
            lambda ss: any(isinstance(x, StepSample) and x.step == step for x in ss), 60
        )


def events(samples: list[Sample], kind: str) -> list[Event]:
    return [s for s in samples if isinstance(s, Event) and s.kind == kind]


def test_socket_dir_is_private_and_removed(tmp_path: Path) -> None:
    server = AgentServer(tmp_path)
    d = server.socket_dir
    assert d.parent == tmp_path.resolve()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert server.socket_path.parent == d
    assert stat.S_ISSOCK(server.socket_path.stat().st_mode)
    server.close()
    assert not d.exists()


def test_default_socket_dir_is_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with AgentServer() as server:
        assert server.socket_dir.parent == tmp_path.resolve()
        assert stat.S_IMODE(server.socket_dir.stat().st_mode) == 0o700
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    with AgentServer() as server:
        assert stat.S_IMODE(server.socket_dir.stat().st_mode) == 0o700


def test_no_tcp_port_is_opened(live: LiveServer) -> None:
    assert good_peer_is_served(live)
    listener = live.server.listener()
    assert listener is not None
    assert listener.family == socket.AF_UNIX
    assert psutil.Process().net_connections(kind="inet") == []


def test_stop_is_prompt_and_removes_the_dir(tmp_path: Path) -> None:
    """Stop does not wait for a connected agent that never speaks (it would wait forever)."""
    live = LiveServer(tmp_path).start()
    idle = connect(live.socket_path)  # a connected agent that says nothing
    assert good_peer_is_served(live)
    took = live.stop(timeout=60)
    assert took < 30
    assert not live.server.socket_dir.exists()
    idle.settimeout(2)
    assert idle.recv(10) == b""  # the server closed it
    idle.close()


def _connect_as(uid: int, path: Path) -> int:
    """Fork, drop to ``uid``, connect; exit 0 when accepted then closed by the server,
    3 when accepted and left open, 13 when the connect itself was denied."""
    pid = os.fork()
    if pid == 0:  # child: no pytest machinery from here on
        code = 2
        try:
            if uid != os.getuid():
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(3)
            try:
                s.connect(str(path))
            except PermissionError:
                code = 13
            else:
                try:
                    code = 0 if s.recv(1) == b"" else 4
                except TimeoutError:
                    code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture
def traversable_base() -> Iterator[Path]:
    """A base directory other users may traverse (pytest's tmp_path is 0700 all the way)."""
    base = Path(tempfile.mkdtemp(prefix="sofa-top-test-", dir="/tmp"))
    os.chmod(base, 0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_other_users_cannot_connect(traversable_base: Path) -> None:
    with LiveServer(traversable_base) as live:
        _other_users_cannot_connect(live)


def _other_users_cannot_connect(live: LiveServer) -> None:
    # the 0700 directory alone keeps them out
    assert _connect_as(NOBODY, live.socket_path) == 13
    # with the directory and socket opened up, SO_PEERCRED still refuses them
    os.chmod(live.server.socket_dir, 0o711)
    os.chmod(live.socket_path, 0o777)
    assert _connect_as(NOBODY, live.socket_path) == 0
    assert live.wait_for(lambda ss: bool(events(ss, "agent-refused")), 60)
    (refused,) = events(live.snapshot(), "agent-refused")
    assert refused.data["uid"] == NOBODY
    assert f"uid {NOBODY}" in refused.message
    # our own uid is accepted (and kept open) through the same opened-up socket
    assert _connect_as(os.getuid(), live.socket_path) == 3
    assert len(events(live.snapshot(), "agent-refused")) == 1
    assert good_peer_is_served(live)


def test_peer_with_wrong_uid_is_refused(tmp_path: Path) -> None:
    """Without root: pretend only another uid may connect, so our own connection is refused."""
    with LiveServer(tmp_path, allowed_uid=os.getuid() + 1) as live:
        with connect(live.socket_path) as s:
            assert s.recv(1) == b""
        assert live.wait_for(lambda ss: bool(events(ss, "agent-refused")), 60)
        assert not any(isinstance(x, StepSample) for x in live.snapshot())


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (struct.pack(">I", MAX_FRAME + 1) + b"{}", "oversized"),
        (struct.pack(">I", 0xFFFFFFFF), "oversized"),
        (struct.pack(">I", 100) + b'{"type": "ev', "truncated"),
        (struct.pack(">I", 5) + b"hello", "not JSON"),
        (encode({"type": "steps", "source": "s", "data": [1, 2, 1, 0, None, None]}), "ends before"),
    ],
)
def test_broken_peer_is_dropped_and_others_served(
    live: LiveServer, payload: bytes, reason: str
) -> None:
    other = connect(live.socket_path)  # a good agent connected before the bad one
    other.sendall(encode({"type": "hello", "v": 2, "pid": 1, "t": 1.0}))
    with connect(live.socket_path) as bad:
        bad.sendall(payload)
    assert live.wait_for(lambda ss: bool(events(ss, "agent-protocol-error")), 60)
    (err,) = events(live.snapshot(), "agent-protocol-error")
    assert reason in err.message
    other.sendall(encode({"type": "steps", "source": "early", "data": [7, 1, 2, 0, None, None]}))
    assert live.wait_for(
        lambda ss: any(isinstance(x, StepSample) and x.name == "early" for x in ss), 60
    )
    other.close()
    assert good_peer_is_served(live)


def test_garbage_peers_never_stop_the_server(tmp_path: Path) -> None:
    with LiveServer(tmp_path) as live:
        sent = 0

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.binary(min_size=1, max_size=3000), st.booleans())
        def check(garbage: bytes, framed: bool) -> None:
            nonlocal sent
            data = struct.pack(">I", len(garbage)) + garbage if framed else garbage
            with connect(live.socket_path) as s:
                s.sendall(data)
            sent += 1
            assert good_peer_is_served(live)

        check()
        assert live.wait_for(
            lambda ss: (
                len(events(ss, "agent-protocol-error")) + len(events(ss, "agent-disconnected"))
                >= 2 * sent
            ),
            60,
        )
        # every garbage peer was dropped for a reason, every good one just disconnected
        assert len(events(live.snapshot(), "agent-protocol-error")) >= sent * 0.9


def test_what_an_exited_agent_sent_is_read_when_the_collector_stops(tmp_path: Path) -> None:
    """The session stops right after the workload exits (its grace is short): steps still in
    the socket then (the collector was busy, say on a loaded machine) are read, not lost."""
    server = AgentServer(tmp_path)
    collector = AgentCollector(server)
    got: list[Sample] = []
    busy, go_on, stop = threading.Event(), threading.Event(), threading.Event()

    def emit(sample: Sample) -> None:
        if isinstance(sample, StepSample) and not busy.is_set():
            busy.set()  # the collector is held here while the rest arrives
            go_on.wait(60)
        got.append(sample)

    thread = threading.Thread(target=collector.run, args=(emit, stop), daemon=True)
    thread.start()
    first = next(_step_ids)
    with connect(server.socket_path) as s:
        s.sendall(
            encode({"type": "hello", "v": 2, "pid": os.getpid(), "t": time.time()})
            + encode({"type": "steps", "source": "test", "data": [first, 1, 2, 0, 4, 0]})
        )
        assert busy.wait(60)
        rest = [next(_step_ids) for _ in range(200)]
        s.sendall(
            b"".join(
                encode({"type": "steps", "source": "test", "data": [n, 1, 2, 0, 4, 0]})
                for n in rest
            )
            + encode({"type": "bye", "pid": os.getpid(), "t": time.time(), "dropped": 0})
        )
    stop.set()  # before the collector has read any of it
    go_on.set()
    thread.join(30)
    assert not thread.is_alive()
    steps = {x.step for x in got if isinstance(x, StepSample)}
    assert steps == {first, *rest}
    assert len(events(got, "agent-exit")) == 1
