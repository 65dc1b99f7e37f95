"""sofa-top's end of the agent connection: a private Unix socket and the "agent" collector.

The socket lives in a fresh per-session directory with mode 0700 (under ``$XDG_RUNTIME_DIR``
when usable, else the temp dir); each connection is also checked with ``SO_PEERCRED`` and
refused unless its uid is ours (attach mode: ours, root or the target's, and the directory then
belongs to the target's uid so that its agent can reach it). No TCP port is ever opened.
Frames are validated strictly: a peer that sends garbage, a truncated or an oversized frame is
dropped (with an Event saying why) while the others keep being served.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import selectors
import shutil
import socket
import struct
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sofa_top.agent.protocol import (
    MAX_FRAME,
    FrameError,
    FrameReader,
)
from sofa_top.collectors.agent_frames import convert_frame, int_field
from sofa_top.collectors.base import Emit
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.samples import (
    Event,
    EventKind,
)

SOCKET_NAME = "agent.sock"
_MAX_UNIX_PATH = 107  # sun_path is 108 bytes with the trailing NUL
_READ_SIZE = 65536
_DRAIN_MAX_S = 5.0  # at stop, what the agents already sent is read, but never for longer
_MAX_PEERS = 256  # the workload and its Python subprocesses; more is a runaway


class AgentServer:
    """Owns the private socket directory and the listening socket (created at construction)."""

    def __init__(self, socket_dir: Path | None = None, owner_uid: int | None = None) -> None:
        """Create the 0700 session directory under ``socket_dir`` (or a default) and listen.

        ``owner_uid`` (attach mode, sofa-top as root): the directory is handed to that uid, the
        target's, so that the agent injected into its process can connect (root still can)."""
        self._dir = _make_session_dir(socket_dir)
        self._path = self._dir / SOCKET_NAME
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self._path))
            if owner_uid is not None and owner_uid != os.geteuid():
                os.chown(self._dir, owner_uid, -1)
                os.chown(self._path, owner_uid, -1)
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

    def accept_agent(
        self, token: str, deadline: float, allowed_uids: Collection[int] | None = None
    ) -> Handshake | str:
        """Attach mode: wait until ``deadline`` (wall time) for the injected agent's hello
        carrying ``token``; other peers are closed. A reason (str) when none came."""
        uids = _allowed(allowed_uids)
        sock = self._sock
        if sock is None:
            return "the agent socket is closed"
        while True:
            left = deadline - time.time()
            if left <= 0:
                return "the injected agent did not connect in time; gave up, the job is untouched"
            readable, _, _ = select.select([sock], [], [], left)
            if not readable:
                continue
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            hs = _handshake(conn, token, deadline, uids)
            if hs is not None:
                return hs

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


@dataclass
class Handshake:
    """The injected agent's accepted connection and its hello (attach mode)."""

    sock: socket.socket
    pid: int
    hello: dict[str, Any]
    reader: FrameReader  # holds whatever arrived after the hello
    refused: str | None = None  # the target already runs an agent: why it declined


def _allowed(uids: Collection[int] | None) -> frozenset[int]:
    return frozenset({os.getuid()} if uids is None else uids)


def _handshake(
    conn: socket.socket, token: str, deadline: float, uids: frozenset[int]
) -> Handshake | None:
    try:
        creds = peer_credentials(conn)
        if creds is not None and creds[1] not in uids:
            conn.close()
            return None
        reader = FrameReader()
        conn.settimeout(max(deadline - time.time(), 0.05))
        while True:
            frame = reader.next_frame()
            if frame is not None:
                break
            data = conn.recv(_READ_SIZE)
            if not data:
                conn.close()
                return None
            reader.feed(data)
    except (OSError, FrameError):
        conn.close()
        return None
    if frame.get("type") != "hello" or frame.get("token") != token:
        conn.close()
        return None
    pid = creds[0] if creds else int_field(frame, "pid", 0)
    refused = frame.get("refused")
    if isinstance(refused, str):
        conn.close()
        return Handshake(conn, pid, frame, reader, refused)
    conn.setblocking(False)
    return Handshake(conn, pid, frame, reader)


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
        allowed_uids: Collection[int] | None = None,
        handshake: Handshake | None = None,
    ) -> None:
        """Serve ``server``'s socket; only peers with ``allowed_uid`` (default: ours; attach
        mode: ``allowed_uids``) get in. ``handshake``: the injected agent, already accepted."""
        self._server = server
        self._poll_s = poll_s
        self._uid = os.getuid() if allowed_uid is None else allowed_uid
        self._uids = frozenset({self._uid}) if allowed_uids is None else frozenset(allowed_uids)
        self._clock = clock
        self._handshake = handshake

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
            hs, self._handshake = self._handshake, None
            if hs is not None:
                self._adopt(hs, sel, peers, emit)
            while not stop.is_set():
                for key, _ in sel.select(self._poll_s):
                    if key.data is None:
                        self._accept(listener, sel, peers, emit)
                    else:
                        self._read(key.data, sel, peers, emit)
            self._drain(sel, peers, emit)
        finally:
            for peer in list(peers.values()):
                with contextlib.suppress(KeyError, ValueError):
                    sel.unregister(peer.sock)
                peer.sock.close()
            sel.close()
            self._server.close()

    def _drain(self, sel: selectors.BaseSelector, peers: dict[int, _Peer], emit: Emit) -> None:
        """Read what the agents had sent when the stop came (an exited workload's last steps,
        its bye: a flood's backlog takes seconds on a busy machine), and the end of stream
        after it; a live agent that keeps sending cannot hold the stop past that."""
        left = {fd: _queued(peer.sock) + 1 for fd, peer in peers.items()}  # +1: the end
        deadline = time.monotonic() + _DRAIN_MAX_S
        while time.monotonic() < deadline:
            ready = [
                key.data
                for key, _ in sel.select(0)
                if key.data is not None and left.get(key.data.sock.fileno(), 0) > 0
            ]
            if not ready:
                return
            for peer in ready:
                fd = peer.sock.fileno()
                left[fd] -= max(1, self._read(peer, sel, peers, emit))

    def _adopt(
        self, hs: Handshake, sel: selectors.BaseSelector, peers: dict[int, _Peer], emit: Emit
    ) -> None:
        peer = _Peer(hs.sock, hs.pid, hs.reader)
        peers[hs.sock.fileno()] = peer
        sel.register(hs.sock, selectors.EVENT_READ, peer)
        for s in convert_frame(hs.hello, hs.pid):
            emit(s)
        self._frames(peer, sel, peers, emit)

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
            if creds is not None and creds[1] not in self._uids:
                conn.close()
                emit(
                    Event(
                        self._clock(),
                        "agent-refused",
                        f"refused agent connection from pid {pid}: "
                        f"uid {creds[1]} is not {_uids_text(self._uids)}",
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
    ) -> int:
        """Read once from ``peer``; the bytes read (0 at its end, which drops it)."""
        try:
            data = peer.sock.recv(_READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as e:
            self._drop(peer, sel, peers, emit, "agent-disconnected", f"pid {peer.pid}: {e}")
            return 0
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
            return 0
        peer.reader.feed(data)
        self._frames(peer, sel, peers, emit)
        return len(data)

    def _frames(
        self, peer: _Peer, sel: selectors.BaseSelector, peers: dict[int, _Peer], emit: Emit
    ) -> None:
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


def _queued(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue (FIONREAD); 0 when it cannot tell."""
    try:
        return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4), "little")
    except OSError:
        return 0


def _uids_text(uids: frozenset[int]) -> str:
    return " or ".join(str(u) for u in sorted(uids))


__all__ = ["MAX_FRAME", "SOCKET_NAME", "AgentCollector", "AgentServer"]
