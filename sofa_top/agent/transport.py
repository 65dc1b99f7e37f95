"""The agent's Unix-socket client (stdlib only). Used only from the agent's drain thread."""

from __future__ import annotations

import contextlib
import select
import socket

# MSG_NOSIGNAL: a workload that restored SIGPIPE's default action must not die when sofa-top does
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)


class Connection:
    """A blocking stream connection with timeouts; any OSError means sofa-top is gone."""

    def __init__(self, path: str, connect_timeout_s: float, send_timeout_s: float) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout_s)
            sock.connect(path)
            sock.settimeout(send_timeout_s)
        except BaseException:
            sock.close()
            raise
        self._sock: socket.socket | None = sock

    @property
    def closed(self) -> bool:
        """True once closed (by us or after a send error)."""
        return self._sock is None

    def send(self, data: bytes) -> None:
        """Send whole frames; on any error the connection is closed and the error re-raised."""
        sock = self._sock
        if sock is None:
            raise ConnectionError("connection closed")
        try:
            sock.sendall(data, _SEND_FLAGS)
        except BaseException:
            self.close()
            raise

    def closed_by_peer(self) -> bool:
        """Whether the peer has closed (or the socket failed); never blocks.

        sofa-top sends nothing to the agent, so anything readable means end of stream."""
        sock = self._sock
        if sock is None:
            return True
        try:
            # a zero-timeout poll first: on a socket with a timeout, recv would wait for data
            # that far (MSG_DONTWAIT notwithstanding), and its TimeoutError is no end of stream
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError, TimeoutError):
            return False
        except (OSError, ValueError):
            return True

    def set_timeout(self, seconds: float) -> None:
        """Bound the next sends (used for the exit flush)."""
        if self._sock is not None:
            self._sock.settimeout(seconds)

    def close(self) -> None:
        """Close the socket (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def detach_after_fork(self) -> None:
        """In a forked child: drop the inherited socket without shutting the parent's down."""
        self.close()
