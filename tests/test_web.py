"""``sofa-top launch --web`` and ``sofa-top serve``: the dashboard served by textual-serve,
loaded in a real headless Chromium (Debian's ``chromium``, ``.ci/apt-packages``), driven over
the DevTools protocol (``tests/browser.py``). The workload is a real torch DataLoader loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path

import psutil
import pytest
from browser import browser_page, chromium_binary
from procs import runs_script, wait_until, workload

from sofa_top.recording.reader import SessionReader

pytest.importorskip("textual_serve", reason="the web extra (textual-serve) is not installed")

SOFA_TOP = str(Path(sys.executable).with_name("sofa-top"))
CHROMIUM = chromium_binary()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (Debian package 'chromium', .ci/apt-packages)"
)
URL = re.compile(r"http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]{20,}/")


class Owner:
    """A ``sofa-top`` serving process: its URL (read from stderr) and everything it printed."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._url = threading.Event()
        self.url = ""
        for stream, sink in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream: object, sink: list[str]) -> None:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            line = raw.decode(errors="replace")
            sink.append(line)
            m = URL.search(line)
            if m and not self.url:
                self.url = m.group(0)
                self._url.set()

    def printed(self, text: str) -> bool:
        """Whether the server printed ``text`` on stderr."""
        return any(text in line for line in self.err)

    def wait_err(self, text: str, timeout: float) -> bool:
        """Wait until the server printed ``text`` on stderr."""
        return wait_until(lambda: self.printed(text), timeout)

    def wait_url(self, timeout: float = 60) -> str:
        assert self._url.wait(timeout), f"no URL printed: {''.join(self.err)}"
        return self.url

    async def on_page(self, waiting: Awaitable[str]) -> str:
        """``waiting``'s screen; a timeout also says what the server printed."""
        try:
            return await waiting
        except TimeoutError as exc:
            printed = "".join(self.err[-40:] + self.out[-20:])
            raise TimeoutError(f"{exc}\nthe server printed:\n{printed}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Owner, Path]]:
    """``sofa-top launch --web`` on an input-bound DataLoader loop (it runs 300 s at most)."""
    pytest.importorskip("torch")
    session = tmp_path / "web.sofa"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [SOFA_TOP, "launch", "--web", "--port", "0", "-o", str(session), "--"]
    owner = Owner(argv + workload("torch_input_bound", 300), env)
    try:
        yield owner, session
    finally:
        owner.stop()


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def descendants(owner: Owner) -> list[psutil.Process]:
    try:
        return psutil.Process(owner.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def workload_procs(owner: Owner, marker: str = "torch_input_bound.py") -> list[psutil.Process]:
    """The owner's children running the workload (other tests on this machine may run it too)."""
    return [p for p in descendants(owner) if runs_script(p, marker)]


def steps_in(session: Path) -> int:
    try:
        reader = SessionReader(session)
    except Exception:
        return 0  # not created yet
    try:
        return reader.count_steps()
    finally:
        reader.close()


def viewers(owner: Owner) -> list[psutil.Process]:
    found = []
    for p in descendants(owner):
        with contextlib.suppress(psutil.Error):
            if "sofa_top.web.viewer" in " ".join(p.cmdline()):
                found.append(p)
    return found


def command_line(screen: str) -> str:
    """The home screen's command box row (the one under its "launch a command" border)."""
    rows = screen.splitlines()
    for i, row in enumerate(rows[:-1]):
        if "─ launch a command ─" in row:  # its border, not the title line above
            return rows[i + 1]
    return ""


def test_serve_and_launch_help() -> None:
    for argv in (["serve", "--help"], ["launch", "--help"]):
        r = subprocess.run([SOFA_TOP, *argv], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert "--web" in r.stdout and "--port" in r.stdout


def test_web_flags_need_web() -> None:
    r = subprocess.run(
        [SOFA_TOP, "launch", "--port", "8000", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "sofa-top: --port and --host go with --web"


def test_port_in_use_starts_nothing(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        marker = tmp_path / "started"
        code = f"open({str(marker)!r}, 'w').close()"
        r = subprocess.run(
            [SOFA_TOP, "launch", "--web", "--port", str(port), "--", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2
    assert f"cannot serve on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_launch_web_token_and_one_owner(served: tuple[Owner, Path]) -> None:
    """The page answers 200 at the printed URL while the workload runs, 403 without the token;
    the token is in no command line; pages come and go without touching the workload."""
    owner, session = served
    url = owner.wait_url()
    assert wait_until(lambda: len(workload_procs(owner)) == 1, 60)
    (job,) = workload_procs(owner)
    assert get(url) == 200
    base = url.rsplit("/", 2)[0]
    assert get(base + "/") == 403
    assert get(base + "/not-the-token/") == 403
    assert get(url + "ws") in (400, 426)  # a websocket endpoint, reached with the token only
    token = url.rstrip("/").rsplit("/", 1)[1]
    for p in psutil.process_iter(["cmdline"]):
        assert token not in " ".join(p.info["cmdline"] or []), p.info
    assert job.is_running() and len(workload_procs(owner)) == 1
    assert wait_until(lambda: steps_in(session) > 0, 150, interval=0.5)
    # SIGTERM: the workload is stopped once, the session finalized, the owner exits 0.
    os.kill(owner.proc.pid, signal.SIGTERM)
    assert owner.proc.wait(120) == 0, "".join(owner.err)
    assert not job.is_running() or job.status() == psutil.STATUS_ZOMBIE
    assert any("session saved" in line for line in owner.out)
    reader = SessionReader(session)
    try:
        reader.check_intact()
        assert reader.meta()["end_reason"] == "SIGTERM"
        assert reader.count_steps() > 0
    finally:
        reader.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_chromium
def test_launch_web_in_chromium(served: tuple[Owner, Path], tmp_path: Path) -> None:
    """Headless Chromium loads the page, finds the verdict of the running workload, presses
    keys (pause; quit and confirm), and takes a screenshot; closing a page leaves the workload
    to its owner, and a new page shows the same run."""
    assert CHROMIUM is not None
    owner, _session = served
    url = owner.wait_url()
    assert wait_until(lambda: len(workload_procs(owner)) == 1, 60)
    (job,) = workload_procs(owner)

    async def first_page() -> str:
        async with browser_page(CHROMIUM) as page:
            await page.open(url)
            screen = await owner.on_page(page.wait_text("INPUT-BOUND", 150))
            await page.press("p")
            await page.wait_text("paused view", 30)
            size = await page.screenshot(tmp_path / "dashboard.png")
            assert size > 20_000  # a drawn dashboard, not a blank page
            return screen

    screen = asyncio.run(first_page())
    assert "DataLoader" in screen
    # The page closed: its viewer is gone, the workload runs on, started once.
    assert wait_until(lambda: not viewers(owner), 60)
    assert job.is_running() and len(workload_procs(owner)) == 1 and owner.proc.poll() is None

    async def second_page() -> None:
        async with browser_page(CHROMIUM) as page:
            await page.open(url)
            await page.wait_text("INPUT-BOUND", 60)
            assert len(viewers(owner)) == 1
            await page.press("q")
            await page.wait_text("stop & quit", 30)
            await page.press("y")
            await asyncio.to_thread(owner.proc.wait, 120)

    asyncio.run(second_page())
    assert owner.proc.returncode == 0, "".join(owner.err)
    assert wait_until(lambda: not job.is_running() or job.status() == "zombie", 30)
    assert any("session saved" in line for line in owner.out)


@pytest.mark.slow
@pytest.mark.timeout(600)
@needs_chromium
def test_serve_home_launches_a_run_the_page_does_not_own(tmp_path: Path) -> None:
    """``sofa-top serve``: the home screen in Chromium launches a command typed into it; the
    page moves to that run's dashboard; closing it leaves the run going; SIGTERM on the server
    stops it and finalizes its session."""
    assert CHROMIUM is not None
    pytest.importorskip("torch")
    owner = Owner([SOFA_TOP, "serve", "--port", "0"], {**os.environ})
    try:
        url = owner.wait_url()
        command = " ".join(workload("torch_input_bound", 300))

        async def page() -> str:
            async with browser_page(CHROMIUM) as page:
                await page.open(url)
                # the scan and the session list done: the home screen takes keys
                await page.wait_screen(
                    lambda s: "no saved session" in s and "scanning" not in s, 60, "the home"
                )
                # "/" focuses the command line; what is typed must show IN it before Enter. Look
                # at the command box's own row: the process list above it may show the same
                # command line (another test's workload), which matched where the typed text
                # had gone nowhere, and Enter then went to an empty line.
                typed = False
                for _ in range(5):
                    await page.press("/")
                    # a retry finds the line focused, the "/" and the earlier text in it:
                    # Ctrl+U empties it (Textual's Input: delete everything left of the cursor)
                    await page.ctrl("u")
                    await page.type_text(command)
                    try:
                        await page.wait_screen(
                            lambda s: "torch_input_bound.py 300" in command_line(s),
                            5,
                            "the command in the command line",
                        )
                        typed = True
                        break
                    except TimeoutError:
                        continue
                if not typed:
                    shown = await page.screen_text()
                    raise AssertionError(
                        f"the typed command never showed in the command line:\n{shown}\n"
                        f"the server printed:\n{''.join(owner.err[-40:] + owner.out[-20:])}"
                    )
                # The owner logs each page's request: an Enter that never reached the app (the
                # page's keys travel browser -> websocket -> app) is pressed again, one that did
                # is not (a second launch)
                for _ in range(3):
                    await page.enter()
                    if await asyncio.to_thread(owner.wait_err, "a page asks to launch", 30):
                        break
                assert owner.printed("a page asks to launch"), (
                    f"{await page.screen_text()}\nthe page sent:\n{await page.sent()}"
                )
                screen = await owner.on_page(page.wait_text("INPUT-BOUND", 180))
                assert "/view/" in await page.location()
                return screen

        screen = asyncio.run(page())
        assert "torch_input_bound.py" in screen
        assert wait_until(lambda: not viewers(owner), 60)
        (job,) = workload_procs(owner)
        assert owner.printed(f"started, pid {job.pid}"), owner.err
        assert job.is_running()
        os.kill(owner.proc.pid, signal.SIGTERM)
        assert owner.proc.wait(120) == 0, "".join(owner.err)
        assert wait_until(lambda: not job.is_running() or job.status() == "zombie", 30)
    finally:
        owner.stop()


def test_serve_logs_what_a_page_asked_and_why_it_failed() -> None:
    """A page's launch that cannot start answers the page with the reason, and the server's
    terminal keeps both the request and the reason (the page's toast lasts seconds)."""
    from sofa_top.web.viewer import ask

    owner = Owner([SOFA_TOP, "serve", "--port", "0"], {**os.environ})
    try:
        owner.wait_url()
        server = psutil.Process(owner.proc.pid)
        (channel,) = [
            c.laddr for c in server.net_connections("unix") if c.laddr.endswith("channel")
        ]
        reply = ask(channel, {"op": "open", "action": "launch", "argv": ["/nonexistent/train"]})
        assert reply["ok"] is False and "command not found" in reply["error"], reply
        assert owner.wait_err("could not launch /nonexistent/train: command not found", 30), (
            owner.err
        )
        assert owner.printed("a page asks to launch /nonexistent/train")
        os.kill(owner.proc.pid, signal.SIGTERM)
        assert owner.proc.wait(60) == 0, "".join(owner.err)
    finally:
        owner.stop()


def test_serve_wider_host_warns() -> None:
    """``--host 0.0.0.0`` serves beyond this machine: a warning, the URL still printed (as
    this machine's), 403 without the token, and SIGTERM ends it with status 0."""
    owner = Owner([SOFA_TOP, "serve", "--host", "0.0.0.0"], {**os.environ})
    try:
        url = owner.wait_url()
        assert any("warning: serving on 0.0.0.0" in line for line in owner.err)
        assert get(url) == 200
        assert get(url.rsplit("/", 2)[0] + "/") == 403
        os.kill(owner.proc.pid, signal.SIGTERM)
        assert owner.proc.wait(60) == 0, "".join(owner.err)
    finally:
        owner.stop()
