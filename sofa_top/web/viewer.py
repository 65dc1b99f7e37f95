"""A page's process: the command textual-serve runs for each browser connection
(``python -m sofa_top.web.viewer CHANNEL KIND ARG``). It draws one view and owns nothing: a
run's dashboard gets its snapshots from the owner (``RemoteSource``), the home screen hands the
user's choice to the owner, a replay reads its session file. Closing the page ends this process
and nothing else.

It ends when what it serves is gone, however that went (``collectors.children.Lifeline``): its
page (textual-serve's pipe to its stdin closes), its server (the parent: ``PR_SET_PDEATHSIG``
and a poll of the parent's PID, the owner's PID), or its channel (the owner removed it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
from rich.text import Text
from textual import work
from textual.app import App

from sofa_top.collectors.children import Lifeline, die_with_parent
from sofa_top.datamodel.snapshot import Snapshot, TargetInfo
from sofa_top.datamodel.source import OnSnapshot, SnapshotSource
from sofa_top.tui import app as dashboard_module
from sofa_top.tui import home as home_module
from sofa_top.tui.app import DashboardApp
from sofa_top.tui.home import HomeApp, HomeChoice
from sofa_top.web.channel import ChannelClosed, connect, message, recv_frame

STOP_WAIT_S = 120.0  # finalizing a session stops the workload first (a grace of 5 s) and flushes
GONE_EXIT_S = 5.0  # what it serves is gone: the most a clean exit may take before a hard one


def ask(channel: str, request: dict[str, Any]) -> dict[str, Any]:
    """One request to the owner and its answer (ChannelClosed when it has none)."""
    sock = connect(channel)
    try:
        sock.sendall(message(request))
        reply = recv_frame(sock)
    finally:
        sock.close()
    if not isinstance(reply, dict):
        raise ChannelClosed("the owner answered with something else")
    return reply


class RemoteSource:
    """A ``SnapshotSource`` for a run the owner records: its snapshots arrive over the channel;
    ``stop`` asks the owner to finish the run (the user confirmed ``q``), ``detach`` leaves it
    running (the page closed)."""

    def __init__(self, channel: str, run_id: str) -> None:
        self.run_id = run_id
        self._sock = connect(channel)
        self._sock.sendall(message({"op": "watch", "run": run_id}))
        reply = recv_frame(self._sock)
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else "a bad answer"
            self._sock.close()
            raise ChannelClosed(str(error))
        self.session_path: str = str(reply["session_path"])
        pid, name, cmdline, launched = reply["target"]
        self.target = TargetInfo(int(pid), str(name), tuple(cmdline), bool(launched))
        self.ended = threading.Event()
        self.end_error: str | None = None
        self.on_end: Callable[[], None] | None = None  # the run ended: not by this page's q
        self._stopping = False

    def start(self, on_snapshot: OnSnapshot) -> None:
        """Relay the owner's snapshots to ``on_snapshot`` from a reader thread."""
        threading.Thread(
            target=self._read, args=(on_snapshot,), name="sofa-top-remote", daemon=True
        ).start()

    def _read(self, on_snapshot: OnSnapshot) -> None:
        try:
            while True:
                frame = recv_frame(self._sock)
                if isinstance(frame, Snapshot):
                    on_snapshot(frame)
                elif frame.get("event") == "ended":
                    self.end_error = frame.get("error")
                    break
        except (ChannelClosed, ValueError) as exc:
            self.end_error = self.end_error or f"the sofa-top that records this run is gone ({exc})"
        self.ended.set()
        if not self._stopping and self.on_end is not None:
            self.on_end()

    def stop(self) -> None:
        """Finish the run in the owner (its workload is stopped, its session finalized) and wait
        until it is done. Raises when the owner reports a failure."""
        if not self.ended.is_set():
            self._stopping = True
            try:
                self._sock.sendall(message({"op": "stop", "run": self.run_id}))
            except OSError as exc:
                raise ChannelClosed(f"the owner is gone: {exc}") from None
            if not self.ended.wait(STOP_WAIT_S):
                raise TimeoutError(f"the run did not finish in {STOP_WAIT_S:g} s")
        if self.end_error:
            raise RuntimeError(self.end_error)

    def detach(self) -> None:
        """Leave the run to its owner."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def _is_a_source(r: RemoteSource) -> SnapshotSource:
    return r  # mypy checks the protocol here


class WebDashboard(DashboardApp):
    """The dashboard in a page: leaving it goes back to the served home screen, if any."""

    # Textual resolves a relative CSS_PATH beside the subclass's module: name the original.
    CSS_PATH = str(Path(dashboard_module.__file__).with_name("dashboard.tcss"))

    def __init__(self, source: SnapshotSource, home_url: str | None) -> None:
        super().__init__(source)
        self.home_url = home_url

    def exit(
        self,
        result: str | None = None,
        return_code: int = 0,
        message: Any = None,
    ) -> None:
        """Quit this page's view (the run goes on unless the user stopped it)."""
        if self.home_url is not None and self.is_running:
            self.open_url(self.home_url, new_tab=False)
        super().exit(result, return_code, message)


class WebHome(HomeApp):
    """The home screen in a page: attach and launch become runs of the owner, shown on their
    own page; a session opens its replay (or its live dashboard, while the owner records it)."""

    CSS_PATH = str(Path(home_module.__file__).with_name("home.tcss"))

    def __init__(self, channel: str) -> None:
        super().__init__()
        self.channel = channel

    def choose(self, choice: HomeChoice) -> None:
        """Hand the choice to the owner (off the UI thread)."""
        if choice.action == "attach":
            request: dict[str, Any] = {"op": "open", "action": "attach", "pid": choice.pid}
        elif choice.action == "launch":
            request = {"op": "open", "action": "launch", "argv": list(choice.argv)}
        else:
            request = {"op": "replay", "path": str(choice.path)}
        self.notify("starting…" if request["op"] == "open" else "opening…", timeout=2)
        self._ask_owner(request)

    @work(thread=True, group="owner")
    def _ask_owner(self, request: dict[str, Any]) -> None:
        try:
            reply = ask(self.channel, request)
        except ChannelClosed as exc:
            reply = {"ok": False, "error": str(exc)}
        self.call_from_thread(self._answered, reply)

    def _answered(self, reply: dict[str, Any]) -> None:
        if reply.get("ok") and isinstance(reply.get("url"), str):
            self.open_url(reply["url"], new_tab=False)
        else:
            self.notify(str(reply.get("error")), severity="error", timeout=8)


def stop_own_children(grace_s: float = 5.0) -> None:
    """Stop what this page's process started itself: an optimizer comparison's runs (each in
    a session of its own, so their process groups), so that closing the page orphans nothing."""
    children = psutil.Process().children()
    for child in children:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGTERM)
    _gone, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)


def _lifeline(app: App[Any], channel: str, parent: int, owner: int | None) -> None:
    """End ``app`` when its page, its server or its channel is gone (and the process, if the
    app does not end within ``GONE_EXIT_S``)."""

    def leave(_reason: str) -> None:
        if isinstance(app, WebDashboard):
            app.home_url = None  # no page to send home
        app.call_from_thread(app.exit)

    Lifeline(
        leave,
        parent=parent,
        pids=() if owner is None else (owner,),
        paths=(channel,),
        stdin=True,
        exit_after_s=GONE_EXIT_S,
    ).start()


def run_view(channel: str, kind: str, arg: str, parent: int | None = None) -> int:
    """Draw one view until the page closes or the user leaves it (or the page's server or
    channel is gone: ``parent``, the PID that started this viewer, and the owner are watched)."""
    parent = os.getppid() if parent is None else parent
    hello = ask(channel, {"op": "hello"})
    home_url = str(hello["home"]) if hello.get("serve") else None
    owner = hello.get("pid")
    owner_pid = owner if isinstance(owner, int) else None
    if kind == "home":
        home = WebHome(channel)
        _lifeline(home, channel, parent, owner_pid)
        home.run()
        return 0
    if kind == "replay":
        from sofa_top.recording.replay import ReplaySource

        replay = ReplaySource(Path(arg))
        try:
            view = WebDashboard(replay, home_url)
            _lifeline(view, channel, parent, owner_pid)
            view.run()
        finally:
            replay.stop()
        return 0
    source = RemoteSource(channel, arg)
    app = WebDashboard(source, home_url)

    def ended() -> None:
        # Another page's q, or the owner stopped: this page has nothing more to show.
        note = Text(f"sofa-top: the run ended; its session: {source.session_path}")
        app.call_from_thread(app.exit, source.session_path, 0, note)

    source.on_end = ended
    _lifeline(app, channel, parent, owner_pid)
    try:
        app.run()
    finally:
        source.detach()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sofa_top.web.viewer CHANNEL KIND ARG``."""
    parent = os.getppid()  # before anything else: the server that started this page's process
    die_with_parent()
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[1] not in ("run", "replay", "home"):
        print("usage: python -m sofa_top.web.viewer CHANNEL run|replay|home ARG", file=sys.stderr)
        return 2
    try:
        code = run_view(args[0], args[1], args[2], parent)
    except ChannelClosed as exc:
        print(f"sofa-top: {exc}", file=sys.stderr)
        code = 1
    stop_own_children()
    sys.stdout.flush()
    sys.stderr.flush()
    # A comparison's thread may still be in the executor: nothing of it is left to wait for.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
