"""Nothing the browser view starts outlives it: a page's viewer ends when its page closes, when
its channel goes and when its server ends (SIGTERM or SIGKILL); so do the workload, py-spy and
every other process of the server's (headless Chromium, ``tests/browser.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import psutil
import pytest
from browser import browser_page, chromium_binary
from procs import read_line, wait_for, wait_until
from test_web import SOFA_TOP, Owner

pytest.importorskip("textual_serve", reason="the web extra (textual-serve) is not installed")

CHROMIUM = chromium_binary()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (Debian package 'chromium', .ci/apt-packages)"
)
GONE_S = 10.0  # what the issue allows a process of sofa-top's after its server ended


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cmdlines() -> list[tuple[psutil.Process, str]]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if p.pid != os.getpid() and alive(p):
            out.append((p, " ".join(p.info["cmdline"] or [])))
    return out


def channel_of(server: int) -> str:
    def found() -> str | None:
        try:
            conns = psutil.Process(server).net_connections("unix")
        except psutil.Error:
            return None
        return next((c.laddr for c in conns if c.laddr.endswith("/channel")), None)

    return wait_for(found, 60, "the owner's channel")


class Server:
    """A ``sofa-top launch --web`` on a light loop (its command line holds a marker of its
    own), and every process of it: its descendants, and whatever names its channel, its
    workload's PID or its own (py-spy, the watchdog)."""

    def __init__(self) -> None:
        self.marker = f"sofa-top-lifetime-{uuid.uuid4().hex[:8]}"
        loop = f"import time  # {self.marker}\nwhile True:\n    time.sleep(0.05)"
        argv = [SOFA_TOP, "launch", "--web", "--port", "0", "--", sys.executable, "-c", loop]
        self.owner = Owner(argv, {**os.environ})
        self.pid = self.owner.proc.pid
        self.url = self.owner.wait_url()
        self.channel = channel_of(self.pid)
        self.job = wait_for(self.workload, 60, "the workload")
        self.seen: dict[int, psutil.Process] = {}

    def workload(self) -> psutil.Process | None:
        return next((p for p, c in cmdlines() if self.marker in c and "launch" not in c), None)

    def viewers(self) -> list[psutil.Process]:
        return [p for p, c in cmdlines() if "sofa_top.web.viewer" in c and self.channel in c]

    def processes(self) -> list[psutil.Process]:
        """Every live process of this server's (the server itself included)."""
        names = (self.channel, self.marker, f"--pid {self.job.pid} ", f"watchdog.py {self.pid}")
        with_names = [p for p, c in cmdlines() if any(n in c + " " for n in names)]
        try:
            kids = psutil.Process(self.pid).children(recursive=True)
            kids.append(psutil.Process(self.pid))
        except psutil.NoSuchProcess:
            kids = []
        for p in with_names + kids:
            self.seen.setdefault(p.pid, p)
        return [p for p in self.seen.values() if alive(p)]

    def describe(self, procs: list[psutil.Process]) -> str:
        lines = []
        for p in procs:
            try:
                lines.append(f"{p.pid} (parent {p.ppid()}): {' '.join(p.cmdline())[:160]}")
            except psutil.Error:
                continue
        return "\n".join(lines) + "\nthe server printed:\n" + "".join(self.owner.err[-20:])

    def kill_everything(self) -> None:
        self.owner.stop()
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                p.kill()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.kill_everything()


async def open_page(url: str, server: Server) -> psutil.Process:
    """A real page load (the page draws, its viewer runs), then the browser is killed; the
    page's viewer."""
    assert CHROMIUM is not None
    async with browser_page(CHROMIUM) as page:
        await page.open(url)
        await server.owner.on_page(page.wait_screen(lambda s: bool(s.strip()), 90, "a drawing"))
        assert await asyncio.to_thread(wait_until, lambda: len(server.viewers()) == 1, 60)
        server.processes()  # remember them all
        (viewer,) = server.viewers()
        return viewer


@needs_chromium
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_nothing_outlives_the_server_after_a_page(server: Server, sig: signal.Signals) -> None:
    """One page opened and closed: its viewer goes while the server runs on; then the server
    is killed (SIGTERM, SIGKILL): within 10 s no process of its is left."""
    viewer = asyncio.run(open_page(server.url, server))
    assert wait_until(lambda: not alive(viewer), GONE_S), server.describe([viewer])
    assert server.owner.proc.poll() is None and alive(server.job)
    assert len(server.processes()) > 2, server.describe(server.processes())  # owner, job, ...
    os.kill(server.pid, sig)
    server.owner.proc.wait(60)
    left = wait_until(lambda: not server.processes(), GONE_S)
    assert left, "left running:\n" + server.describe(server.processes())


@needs_chromium
@pytest.mark.timeout(240)
def test_a_viewer_ends_with_its_killed_server(server: Server) -> None:
    """The server is killed (SIGKILL) while its page is open: the viewer, the workload and the
    rest are gone within 10 s."""

    async def page_open_while_killed() -> None:
        assert CHROMIUM is not None
        async with browser_page(CHROMIUM) as page:
            await page.open(server.url)
            await server.owner.on_page(page.wait_screen(lambda s: bool(s.strip()), 90, "a page"))
            assert await asyncio.to_thread(wait_until, lambda: len(server.viewers()) == 1, 60)
            server.processes()  # remember them all
            os.kill(server.pid, signal.SIGKILL)
            await asyncio.to_thread(server.owner.proc.wait, 60)
            gone = await asyncio.to_thread(wait_until, lambda: not server.processes(), GONE_S)
            assert gone, "left running:\n" + server.describe(server.processes())

    asyncio.run(page_open_while_killed())


def drain(proc: subprocess.Popen[bytes]) -> None:
    """Read what ``proc`` writes to its stdout pipe until it closes (a full pipe blocks it)."""
    with contextlib.suppress(OSError, ValueError):
        while proc.stdout is not None and proc.stdout.read1(65536):
            pass


def test_a_viewer_ends_when_its_channel_goes() -> None:
    """A viewer whose stdin and parent stay (this test holds both) ends once its owner is
    gone and its channel removed (SIGTERM on ``sofa-top serve``)."""
    owner = Owner([SOFA_TOP, "serve", "--port", "0"], {**os.environ})
    viewer: subprocess.Popen[bytes] | None = None
    try:
        owner.wait_url()
        channel = channel_of(owner.proc.pid)
        env = {**os.environ, "TEXTUAL_DRIVER": "textual.drivers.web_driver:WebDriver"}
        viewer = subprocess.Popen(
            [sys.executable, "-m", "sofa_top.web.viewer", channel, "home", ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert read_line(viewer, 60) == b"__GANGLION__\n"  # the app runs
        threading.Thread(target=drain, args=(viewer,), daemon=True).start()
        os.kill(owner.proc.pid, signal.SIGTERM)
        assert owner.proc.wait(60) == 0, "".join(owner.err)
        assert not os.path.exists(channel)
        try:
            viewer.wait(GONE_S)
        except subprocess.TimeoutExpired:
            pytest.fail("the viewer outlived its channel")
    finally:
        owner.stop()
        if viewer is not None:
            viewer.kill()
            viewer.wait(10)
            for pipe in (viewer.stdin, viewer.stdout):
                if pipe is not None:
                    pipe.close()
