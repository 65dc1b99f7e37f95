"""sofa-top's end of the agent connection: a private Unix socket and the "agent" collector.

The socket lives in a fresh per-session directory with mode 0700 (under ``$XDG_RUNTIME_DIR``
when usable, else the temp dir); each connection is also checked with ``SO_PEERCRED`` and
refused unless its uid is ours. No TCP port is ever opened. Frames are validated strictly: a
peer that sends garbage, a truncated or an oversized frame is dropped (with an Event saying
why) while the others keep being served.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sofa_top.agent.protocol import MAX_FRAME, STEP_FIELDS, FrameError, FrameReader
from sofa_top.collectors.base import Emit
from sofa_top.model.errors import UserError
from sofa_top.model.samples import (
    AgentInfo,
    Event,
    EventKind,
    PipelineSample,
    PipelineStage,
    Sample,
    StepSample,
    event_kind,
    stage_kind,
)

SOCKET_NAME = "agent.sock"
_MAX_UNIX_PATH = 107  # sun_path is 108 bytes with the trailing NUL
_READ_SIZE = 65536
_MAX_PEERS = 256  # the workload and its Python subprocesses; more is a runaway


class AgentServer:
    """Owns the private socket directory and the listening socket (created at construction)."""

    def __init__(self, socket_dir: Path | None = None) -> None:
        """Create the 0700 session directory under ``socket_dir`` (or a default) and listen."""
        self._dir = _make_session_dir(socket_dir)
        self._path = self._dir / SOCKET_NAME
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self._path))
            sock.listen(64)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise UserError(f"cannot listen on {self._path}: {e.strerror or e}") from None
        self._sock: socket.socket | None = sock
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        """Where agents connect (pass it to ``agent_env``)."""
        return self._path

    @property
    def socket_dir(self) -> Path:
        """The private per-session directory holding the socket."""
        return self._dir

    def listener(self) -> socket.socket | None:
        """The listening socket, or None once closed."""
        return self._sock

    def close(self) -> None:
        """Stop listening and remove the session directory (idempotent)."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> AgentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _make_session_dir(base: Path | None) -> Path:
    candidates: list[Path] = []
    if base is not None:
        candidates.append(Path(base))
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
            candidates.append(Path(runtime))
        candidates.append(Path(tempfile.gettempdir()))
        candidates.append(Path("/tmp"))
    problems: list[str] = []
    for parent in candidates:
        path_len = len(str(parent.resolve())) + len("/sofa-top-XXXXXXXX/") + len(SOCKET_NAME)
        if path_len > _MAX_UNIX_PATH:
            problems.append(f"{parent}: too long for a Unix socket path")
            continue
        try:
            d = Path(tempfile.mkdtemp(prefix="sofa-top-", dir=parent)).resolve()
            os.chmod(d, 0o700)  # mkdtemp already does, but say it where it matters
        except OSError as e:
            problems.append(f"{parent}: {e.strerror or e}")
            continue
        return d
    raise UserError(
        "cannot create a private directory for the agent socket: " + "; ".join(problems)
    )


# -- frame conversion -------------------------------------------------------------------------


def _num(obj: dict[str, Any], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FrameError(f"{obj.get('type')}.{key}: expected a number")
    return float(v)


def _int(obj: dict[str, Any], key: str, default: int | None = None) -> int:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise FrameError(f"{obj.get('type')}.{key}: expected an integer")
    return v


def _str(obj: dict[str, Any], key: str, default: str | None = None) -> str:
    v = obj.get(key, default)
    if not isinstance(v, str):
        raise FrameError(f"{obj.get('type')}.{key}: expected a string")
    return v


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    v = obj.get(key, [])
    if not isinstance(v, list):
        raise FrameError(f"{obj.get('type')}.{key}: expected a list")
    return v


def _opt_int(v: object, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise FrameError(f"{what}: expected an integer or null")
    return v


def _opt_num(v: object, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FrameError(f"{what}: expected a number or null")
    return float(v)


def _steps(frame: dict[str, Any], pid: int) -> list[Sample]:
    source = _str(frame, "source")
    data = _list(frame, "data")
    width = len(STEP_FIELDS)
    if len(data) % width:
        raise FrameError(f"steps.data: length {len(data)} is not a multiple of {width}")
    out: list[Sample] = []
    for i in range(0, len(data), width):
        step, start_us, end_us, wait_us, bs, cpu_us = data[i : i + width]
        for v in (step, start_us, end_us, wait_us):
            if isinstance(v, bool) or not isinstance(v, int):
                raise FrameError("steps.data: step and times must be integers")
        if end_us < start_us or wait_us < 0:
            raise FrameError("steps.data: a step ends before it starts, or waits < 0")
        wait_cpu = _opt_int(cpu_us, "steps.data: wait CPU")
        if wait_cpu is not None and wait_cpu < 0:
            raise FrameError("steps.data: wait CPU < 0")
        out.append(
            StepSample(
                ts=end_us / 1e6,
                step=step,
                start=start_us / 1e6,
                duration_s=(end_us - start_us) / 1e6,
                input_wait_s=wait_us / 1e6,
                source=source,
                batch_size=_opt_int(bs, "steps.data: batch size"),
                pid=pid,
                wait_cpu_s=None if wait_cpu is None else wait_cpu / 1e6,
            )
        )
    return out


def _info(frame: dict[str, Any], pid: int) -> AgentInfo:
    frameworks: list[tuple[str, str]] = []
    for fw in _list(frame, "frameworks"):
        if not (isinstance(fw, list) and len(fw) == 2 and all(isinstance(x, str) for x in fw)):
            raise FrameError("info.frameworks: expected [name, version] pairs")
        frameworks.append((fw[0], fw[1]))
    applied = _list(frame, "hooks_applied")
    if not all(isinstance(h, str) for h in applied):
        raise FrameError("info.hooks_applied: expected strings")
    skipped: list[tuple[str, str]] = []
    for sk in _list(frame, "hooks_skipped"):
        if not (isinstance(sk, list) and len(sk) == 2 and all(isinstance(x, str) for x in sk)):
            raise FrameError("info.hooks_skipped: expected [hook, reason] pairs")
        skipped.append((sk[0], sk[1]))
    notes: list[tuple[str, str]] = []
    for note in _list(frame, "step_notes"):  # optional: older agents do not send it
        pair = isinstance(note, list) and len(note) == 2
        if not (pair and all(isinstance(x, str) for x in note)):
            raise FrameError("info.step_notes: expected [source, note] pairs")
        notes.append((note[0], note[1]))
    return AgentInfo(
        ts=_num(frame, "t"),
        pid=pid,
        python=_str(frame, "python", ""),
        frameworks=tuple(frameworks),
        hooks_applied=tuple(applied),
        hooks_skipped=tuple(skipped),
        dropped=_int(frame, "dropped", 0),
        step_notes=tuple(notes),
    )


def _pipeline(frame: dict[str, Any], pid: int) -> PipelineSample:
    stages: list[PipelineStage] = []
    for st in _list(frame, "stages"):
        if not isinstance(st, dict):
            raise FrameError("pipeline.stages: expected objects")
        bottleneck = st.get("is_bottleneck", False)
        if not isinstance(bottleneck, bool):
            raise FrameError("pipeline.stages.is_bottleneck: expected a boolean")
        stages.append(
            PipelineStage(
                name=_str(st, "name"),
                kind=stage_kind(st.get("kind")),
                parallelism=_opt_int(st.get("parallelism"), "pipeline.stages.parallelism"),
                buffer=_opt_int(st.get("buffer"), "pipeline.stages.buffer"),
                self_time_s=_opt_num(st.get("self_time_s"), "pipeline.stages.self_time_s"),
                is_bottleneck=bottleneck,
            )
        )
    return PipelineSample(
        ts=_num(frame, "t"),
        framework=_str(frame, "framework"),
        stages=tuple(stages),
        pid=pid,
        note=_str(frame, "note", ""),
    )


def _data(frame: dict[str, Any], key: str) -> dict[str, object]:
    v = frame.get(key, {})
    if not isinstance(v, dict):
        raise FrameError(f"{frame.get('type')}.{key}: expected an object")
    return dict(v)


def convert_frame(frame: dict[str, Any], pid: int) -> list[Sample]:
    """Turn one decoded frame from the agent of process ``pid`` into samples."""
    kind = frame["type"]
    if kind == "steps":
        return _steps(frame, pid)
    if kind == "info":
        return [_info(frame, pid)]
    if kind == "pipeline":
        return [_pipeline(frame, pid)]
    if kind == "workers":
        workers = _list(frame, "workers")
        if not all(isinstance(w, int) and not isinstance(w, bool) for w in workers):
            raise FrameError("workers.workers: expected pids")
        framework = _str(frame, "framework", "")
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-workers",
                message=f"pid {pid}: {len(workers)} {framework} data-loading worker(s)",
                data={"pid": pid, "framework": framework, "workers": list(workers)},
            )
        ]
    if kind == "event":
        told = _str(frame, "kind")
        data = {"pid": pid, **_data(frame, "data")}
        event = event_kind(told)
        if event is None:  # an agent newer than this sofa-top: keep what it said, as data
            return [
                Event(
                    ts=_num(frame, "t"),
                    kind="agent-unknown-frame",
                    message=f"pid {pid}: unknown event kind {told!r}: {_str(frame, 'message', '')}",
                    data={"pid": pid, "type": "event", "kind": told},
                )
            ]
        return [
            Event(
                ts=_num(frame, "t"),
                kind=event,
                message=_str(frame, "message", ""),
                data=data,
            )
        ]
    if kind == "hello":
        argv = _list(frame, "argv")
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-connected",
                message=f"agent connected from pid {pid} (python {_str(frame, 'python', '?')})",
                data={
                    "pid": pid,
                    "ppid": _int(frame, "ppid", 0),
                    "version": _int(frame, "v", 0),
                    "argv": [str(a) for a in argv],
                    "settings": _data(frame, "settings"),
                },
            )
        ]
    if kind == "bye":
        return [
            Event(
                ts=_num(frame, "t"),
                kind="agent-exit",
                message=f"agent of pid {pid} exited",
                data={"pid": pid, "dropped": _int(frame, "dropped", 0)},
            )
        ]
    # a newer agent: tell, but keep the connection
    return [
        Event(
            ts=time.time(),
            kind="agent-unknown-frame",
            message=f"pid {pid}: unknown frame type {kind!r} ignored",
            data={"pid": pid, "type": kind},
        )
    ]


# -- the collector ------------------------------------------------------------------------------


def peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the peer via SO_PEERCRED, or None where the OS has none."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


@dataclass
class _Peer:
    sock: socket.socket
    pid: int
    reader: FrameReader = field(default_factory=FrameReader)
    said_bye: bool = False


class AgentCollector:
    """Collector "agent": serves agent connections and emits their samples."""

    name = "agent"

    def __init__(
        self,
        server: AgentServer,
        poll_s: float = 0.1,
        allowed_uid: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Serve ``server``'s socket; only peers with ``allowed_uid`` (default: ours) get in."""
        self._server = server
        self._poll_s = poll_s
        self._uid = os.getuid() if allowed_uid is None else allowed_uid
        self._clock = clock

    def run(self, emit: Emit, stop: threading.Event) -> None:
        """Accept and read until ``stop`` is set; then close everything and remove the dir."""
        listener = self._server.listener()
        if listener is None:
            emit(Event(self._clock(), "agent-error", "agent socket already closed"))
            return
        sel = selectors.DefaultSelector()
        peers: dict[int, _Peer] = {}
        try:
            sel.register(listener, selectors.EVENT_READ, None)
            while not stop.is_set():
                for key, _ in sel.select(self._poll_s):
                    if key.data is None:
                        self._accept(listener, sel, peers, emit)
                    else:
                        self._read(key.data, sel, peers, emit)
        finally:
            for peer in list(peers.values()):
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(peer.sock)
                peer.sock.close()
            sel.close()
            self._server.close()

    def _accept(
        self,
        listener: socket.socket,
        sel: selectors.BaseSelector,
        peers: dict[int, _Peer],
        emit: Emit,
    ) -> None:
        for _ in range(32):  # drain the backlog, but let reads in between
            try:
                conn, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                emit(Event(self._clock(), "agent-error", f"accept failed: {e}"))
                return
            try:
                creds = peer_credentials(conn)
            except OSError as e:
                conn.close()
                emit(Event(self._clock(), "agent-refused", f"cannot read peer credentials: {e}"))
                continue
            pid = creds[0] if creds else 0
            if creds is not None and creds[1] != self._uid:
                conn.close()
                emit(
                    Event(
                        self._clock(),
                        "agent-refused",
                        f"refused agent connection from pid {pid}: "
                        f"uid {creds[1]} is not {self._uid}",
                        {"pid": pid, "uid": creds[1], "gid": creds[2]},
                    )
                )
                continue
            if len(peers) >= _MAX_PEERS:
                conn.close()
                emit(
                    Event(
                        self._clock(),
                        "agent-refused",
                        f"refused agent connection from pid {pid}: {_MAX_PEERS} agents already",
                        {"pid": pid},
                    )
                )
                continue
            conn.setblocking(False)
            peer = _Peer(conn, pid)
            peers[conn.fileno()] = peer
            sel.register(conn, selectors.EVENT_READ, peer)

    def _drop(
        self,
        peer: _Peer,
        sel: selectors.BaseSelector,
        peers: dict[int, _Peer],
        emit: Emit | None,
        kind: EventKind | None,
        message: str,
    ) -> None:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(peer.sock)
        peers.pop(peer.sock.fileno(), None)
        peer.sock.close()
        if emit is not None and kind is not None:
            emit(Event(self._clock(), kind, message, {"pid": peer.pid}))

    def _read(
        self,
        peer: _Peer,
        sel: selectors.BaseSelector,
        peers: dict[int, _Peer],
        emit: Emit,
    ) -> None:
        try:
            data = peer.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._drop(peer, sel, peers, emit, "agent-disconnected", f"pid {peer.pid}: {e}")
            return
        if not data:
            if peer.reader.pending:
                self._drop(
                    peer,
                    sel,
                    peers,
                    emit,
                    "agent-protocol-error",
                    f"pid {peer.pid}: truncated frame at end of stream "
                    f"({peer.reader.pending} bytes pending)",
                )
            elif peer.said_bye:
                self._drop(peer, sel, peers, None, None, "")  # its "bye" was already reported
            else:
                self._drop(
                    peer,
                    sel,
                    peers,
                    emit,
                    "agent-disconnected",
                    f"pid {peer.pid}: connection closed without goodbye",
                )
            return
        peer.reader.feed(data)
        while True:
            try:
                frame = peer.reader.next_frame()
                if frame is None:
                    return
                samples = convert_frame(frame, peer.pid)
            except FrameError as e:
                self._drop(
                    peer, sel, peers, emit, "agent-protocol-error", f"pid {peer.pid}: {e}; dropped"
                )
                return
            if frame["type"] == "bye":
                peer.said_bye = True
            for s in samples:
                emit(s)


__all__ = ["MAX_FRAME", "SOCKET_NAME", "AgentCollector", "AgentServer", "convert_frame"]
