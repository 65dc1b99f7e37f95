"""The owner: the one process that starts, records and stops every workload its pages show.

Each run is started once (``add``), feeds its snapshots to whichever viewers watch it, and is
finished once (``finish``: by a page's confirmed ``q``, or ``finish_all`` on the owner's
SIGINT/SIGTERM/SIGHUP), whatever pages open and close meanwhile. Pages are addressed by views:
a run's live dashboard, a recorded session's replay, or the home screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sofa_top.collectors import children
from sofa_top.datamodel.errors import UserError
from sofa_top.datamodel.snapshot import Snapshot
from sofa_top.launch import Run
from sofa_top.web.channel import (
    ChannelClosed,
    decode,
    message,
    peer_uid,
    read_frame,
    snapshot_frame,
)

ViewKind = Literal["run", "replay", "home"]
SLOW_VIEWER_BYTES = 8 * 2**20  # a viewer this far behind skips snapshots until it catches up
Opener = Callable[[dict[str, Any]], Run]


@dataclass
class OwnedRun:
    """A run this owner started, and who watches it."""

    id: str
    run: Run
    latest: Snapshot | None = None
    watchers: set[asyncio.StreamWriter] = field(default_factory=set)
    finishing: asyncio.Task[None] | None = None
    ended: bool = False
    error: str | None = None


@dataclass(frozen=True)
class View:
    """What one page shows."""

    kind: ViewKind
    arg: str = ""  # the run's id, or the session file of a replay


class Owner:
    """Runs, views and the channel the viewers reach them by."""

    def __init__(self, base_path: str, opener: Opener | None = None) -> None:
        """``base_path``: the pages' URL path (``/TOKEN/``); ``opener``: how a page's attach or
        launch request becomes a ``Run`` (None: this owner shows one run, ``launch --web``)."""
        self.base_path = base_path
        self.opener = opener
        self.runs: dict[str, OwnedRun] = {}
        self.views: dict[str, View] = {}
        self.default_view = View("home")
        self._dir = Path(tempfile.mkdtemp(prefix="sofa-top-web-"))  # 0700
        self.channel_path = str(self._dir / "channel")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self.run_ended = asyncio.Event()

    # -- the owner's life ------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the channel (call from the event loop that serves the pages)."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_unix_server(self._client, path=self.channel_path)

    async def close(self) -> None:
        """Stop listening and remove the channel's directory."""
        if self._server is not None:
            self._server.close()
            for run in self.runs.values():
                for w in list(run.watchers):
                    w.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        shutil.rmtree(self._dir, ignore_errors=True)

    def add(self, run: Run) -> str:
        """Start ``run`` (once) and make it a view; its id."""
        rid = uuid.uuid4().hex[:12]
        owned = OwnedRun(rid, run)
        self.runs[rid] = owned
        self.views[rid] = View("run", rid)
        if run.popen is not None and not run.keep_running:
            children.guard(run.popen.pid)  # stopped even when this owner is killed
        run.start(lambda snap: self._publish(owned, snap))
        return rid

    async def finish(self, rid: str, reason: str) -> None:
        """Stop the run's workload (if it still runs) and finalize its session, once; every
        viewer of it hears that it ended."""
        owned = self.runs.get(rid)
        if owned is None:
            return
        if owned.finishing is None:
            owned.finishing = asyncio.ensure_future(self._finish(owned, reason))
        await asyncio.shield(owned.finishing)

    async def finish_all(self, reason: str) -> None:
        """Finish every run (the owner is stopping)."""
        await asyncio.gather(*(self.finish(rid, reason) for rid in list(self.runs)))

    async def _finish(self, owned: OwnedRun, reason: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            # returns once the session is final, or cut at its bound (``launch.FINISH_BOUND_S``)
            await loop.run_in_executor(None, owned.run.finish, reason)
            owned.error = owned.run.cut
            if owned.error is not None and self.opener is not None:
                # serve's terminal is its log (launch --web says it as it exits)
                print(f"sofa-top: {owned.error}", file=sys.stderr, flush=True)
        except Exception as exc:  # said to the viewers and on exit; the path is still worth having
            owned.error = f"{type(exc).__name__}: {exc}"
        popen = owned.run.popen
        if popen is not None and popen.returncode is not None:
            children.release(popen.pid)  # reaped: its PID is free for others
        owned.ended = True
        frame = message(
            {"event": "ended", "error": owned.error, "session_path": owned.run.session_path}
        )
        for w in list(owned.watchers):
            self._send(w, frame, force=True)
        self.run_ended.set()

    # -- views -----------------------------------------------------------------------------------

    def view_command(self, view_id: str | None) -> list[str] | None:
        """The viewer command textual-serve runs for a page (None: no such view)."""
        view = self.default_view if view_id is None else self.views.get(view_id)
        if view is None:
            return None
        return [sys.executable, "-m", "sofa_top.web.viewer", self.channel_path, view.kind, view.arg]

    def view_url(self, view_id: str) -> str:
        """The page (URL path) of a view."""
        if self.default_view == self.views.get(view_id):
            return self.base_path
        return f"{self.base_path}view/{view_id}/"

    def _replay_view(self, path: str) -> str:
        for rid, owned in self.runs.items():
            if os.path.realpath(owned.run.session_path) == os.path.realpath(path):
                return rid  # a session this owner is recording: its live dashboard
        vid = uuid.uuid4().hex[:12]
        self.views[vid] = View("replay", path)
        return vid

    # -- snapshots -------------------------------------------------------------------------------

    def _publish(self, owned: OwnedRun, snapshot: Snapshot) -> None:
        # The hub's thread: pickle here (only when someone watches), send on the loop.
        owned.latest = snapshot
        if not owned.watchers or self._loop is None:
            return
        frame = snapshot_frame(snapshot)
        with contextlib.suppress(RuntimeError):  # the loop closed: the owner is exiting
            self._loop.call_soon_threadsafe(self._broadcast, owned, frame)

    def _broadcast(self, owned: OwnedRun, frame: bytes) -> None:
        for w in list(owned.watchers):
            self._send(w, frame)

    @staticmethod
    def _send(writer: asyncio.StreamWriter, frame: bytes, force: bool = False) -> None:
        if writer.is_closing():
            return
        if not force and writer.transport.get_write_buffer_size() > SLOW_VIEWER_BYTES:
            return
        writer.write(frame)

    # -- the channel -----------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            if sock is None or peer_uid(sock) not in (os.geteuid(), 0):
                return  # the directory is 0700; this is the second lock
            while True:
                kind, payload = await read_frame(reader)
                request = decode(kind, payload)
                if not isinstance(request, dict):
                    return
                reply = await self._handle(request, writer)
                if reply is not None:
                    writer.write(message(reply))
        except (ChannelClosed, ValueError, OSError):
            pass
        finally:
            for owned in self.runs.values():
                owned.watchers.discard(writer)
            writer.close()

    async def _handle(
        self, req: dict[str, Any], writer: asyncio.StreamWriter
    ) -> dict[str, Any] | None:
        op = req.get("op")
        if op == "hello":
            # the pid: a viewer ends when its owner does (``viewer._lifeline``)
            return {
                "ok": True,
                "home": self.base_path,
                "serve": self.opener is not None,
                "pid": os.getpid(),
            }
        if op == "watch":
            owned = self.runs.get(str(req.get("run")))
            if owned is None:
                return {"ok": False, "error": "no such run (the server was restarted?)"}
            t = owned.run.target
            writer.write(
                message(
                    {
                        "ok": True,
                        "session_path": owned.run.session_path,
                        "target": [t.pid, t.name, list(t.cmdline), t.launched],
                    }
                )
            )
            if owned.ended:
                writer.write(message({"event": "ended", "error": owned.error}))
                return None
            owned.watchers.add(writer)
            if owned.latest is not None:
                writer.write(snapshot_frame(owned.latest))
            return None
        if op == "stop":
            await self.finish(str(req.get("run")), "user quit")
            return None  # the "ended" event is the answer
        if op == "open":
            return await self._open(req)
        if op == "replay":
            path = req.get("path")
            if not isinstance(path, str):
                return {"ok": False, "error": "replay needs a session path"}
            return {"ok": True, "url": self.view_url(self._replay_view(path))}
        return {"ok": False, "error": f"unknown request {op!r}"}

    async def _open(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.opener is None:
            return {"ok": False, "error": "this page shows one workload: start sofa-top serve"}
        loop = asyncio.get_running_loop()
        try:
            run = await loop.run_in_executor(None, self.opener, req)
        except UserError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "url": self.view_url(self.add(run))}
