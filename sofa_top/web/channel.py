"""The private channel between the owner process and its page viewers: a Unix socket in a 0700
directory (peers of another uid are refused), carrying frames of one kind byte, a 4-byte length
and the payload.

Frames: ``J`` a JSON message (both ways), ``S`` a pickled ``Snapshot`` (owner to viewer only).
Pickle is safe here: the viewer unpickles only what the owner, the same user's sofa-top of the
same install, wrote into a socket nobody else can reach; the dashboard gets the very objects
the terminal one draws. A viewer's messages are JSON ``{"op": ...}`` requests (``Request``).
"""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import struct
from typing import Any, Literal

from sofa_top.datamodel.snapshot import Snapshot

HEADER = struct.Struct(">cI")
MAX_FRAME = 64 * 2**20  # a snapshot is tens of KiB; anything near this is not one of ours
FrameKind = Literal[b"J", b"S"]


class ChannelClosed(Exception):
    """The other side went away."""


def encode(kind: FrameKind, payload: bytes) -> bytes:
    """One frame."""
    return HEADER.pack(kind, len(payload)) + payload


def message(obj: dict[str, Any]) -> bytes:
    """A ``J`` frame holding ``obj``."""
    return encode(b"J", json.dumps(obj, separators=(",", ":")).encode())


def snapshot_frame(snapshot: Snapshot) -> bytes:
    """An ``S`` frame holding ``snapshot``."""
    return encode(b"S", pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))


def decode(kind: bytes, payload: bytes) -> dict[str, Any] | Snapshot:
    """A frame's content: a JSON object or a snapshot."""
    if kind == b"J":
        obj = json.loads(payload)
        if not isinstance(obj, dict):
            raise ValueError("a channel message must be a JSON object")
        return obj
    if kind == b"S":
        snap = pickle.loads(payload)
        if not isinstance(snap, Snapshot):
            raise ValueError("an S frame must hold a Snapshot")
        return snap
    raise ValueError(f"unknown frame kind {kind!r}")


async def read_frame(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next frame's kind and payload (ChannelClosed at the end)."""
    try:
        kind, size = HEADER.unpack(await reader.readexactly(HEADER.size))
        if size > MAX_FRAME:
            raise ChannelClosed(f"frame of {size} bytes")
        return kind, await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        raise ChannelClosed(str(exc)) from None


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 2**20))
        if not chunk:
            raise ChannelClosed("the owner closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> dict[str, Any] | Snapshot:
    """Blocking: the next frame's content (ChannelClosed at the end)."""
    try:
        kind, size = HEADER.unpack(_recv_exactly(sock, HEADER.size))
        if size > MAX_FRAME:
            raise ChannelClosed(f"frame of {size} bytes")
        return decode(kind, _recv_exactly(sock, size))
    except OSError as exc:
        raise ChannelClosed(str(exc)) from None


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def connect(path: str) -> socket.socket:
    """A blocking connection to the owner's channel."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise ChannelClosed(f"cannot reach sofa-top at {path}: {exc.strerror or exc}") from None
    return sock
