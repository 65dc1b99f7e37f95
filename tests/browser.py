"""A headless Chromium driven over the DevTools protocol (CDP), for the tests of the served
dashboard: load a page, read the terminal it draws, press keys, take a screenshot.

The library is aiohttp's websocket client (aiohttp comes with textual-serve, in the ``web``
extra): no browser download, no driver binary; Chromium is Debian's (``.ci/apt-packages``).

The page is textual-serve's xterm.js terminal, drawn on a canvas (WebGL, or the canvas renderer
where WebGL is missing): its text is not in the DOM. A script that runs before the page's own
(``Page.addScriptToEvaluateOnNewDocument``) keeps a reference to the xterm ``Terminal`` when
textual-serve's client stores it, and ``screen_text`` reads the rows of that terminal's buffer:
what the canvas draws, cell for cell.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # root, as CI and this machine run the tests
    "--disable-gpu",
    "--disable-dev-shm-usage",  # a container's /dev/shm may be too small for the renderer
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
)

# textual-serve's client does `this.terminal = new Terminal(...)` on an object with no own
# `terminal` property: a setter on Object.prototype sees it, keeps it, and makes it an own one.
HOOK = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true});
    if (value && value.buffer) { window.__sofaTerminal = value; }
  },
});
// what the page sent its app (keys, resizes, focus, blur: the last 200) and whether the
// socket closed, for a test's failure message
window.__sofaSent = [];
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data) {
  window.__sofaSent.push([Date.now(), String(data).slice(0, 120)]);
  if (window.__sofaSent.length > 200) { window.__sofaSent.shift(); }
  if (!this.__sofaWatched) {
    this.__sofaWatched = true;
    this.addEventListener("close", (e) => window.__sofaSent.push([Date.now(), "CLOSED " + e.code]));
  }
  return send.call(this, data);
};
"""
SCREEN_JS = """(() => {
  const t = window.__sofaTerminal;
  if (!t) { return null; }
  const b = t.buffer.active, rows = [];
  for (let i = 0; i < t.rows; i++) {
    const line = b.getLine(b.viewportY + i);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""


def chromium_binary() -> str | None:
    """Debian's ``chromium`` (or another Chromium/Chrome on PATH), None when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One browser tab over its CDP websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            fut = self._pending.pop(data.get("id", -1), None)
            if fut is not None and not fut.done():
                fut.set_result(data)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("the browser closed the DevTools socket"))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a CDP method; its result (RuntimeError for a protocol error)."""
        i = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[i] = fut
        await self._ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        r = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def open(self, url: str) -> None:
        """Navigate to ``url`` with the terminal hook installed."""
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Page.addScriptToEvaluateOnNewDocument", source=HOOK)
        await self.send("Page.navigate", url=url)

    async def screen_text(self) -> str | None:
        """The terminal's rows as text (None before the page made its terminal)."""
        text = await self.evaluate(SCREEN_JS)
        return text if isinstance(text, str) else None

    async def sent(self) -> str:
        """What the page sent its app over the websocket, newest last (one message a line)."""
        sent = await self.evaluate("JSON.stringify(window.__sofaSent || [])")
        return "\n".join(f"{t} {m}" for t, m in json.loads(sent or "[]"))

    async def wait_text(self, needle: str, timeout: float) -> str:
        """Wait until the terminal shows ``needle``; the screen then (TimeoutError says what
        it showed last)."""
        return await self.wait_screen(lambda s: needle in s, timeout, repr(needle))

    async def wait_screen(self, ready: Callable[[str], bool], timeout: float, what: str) -> str:
        """Wait until ``ready(screen)``; the screen then."""
        deadline = time.monotonic() + timeout
        last: str | None = None
        while time.monotonic() < deadline:
            last = await self.screen_text()
            if last is not None and ready(last):
                return last
            await asyncio.sleep(0.25)
        raise TimeoutError(f"{what} not on the page after {timeout:g} s; it showed:\n{last}")

    async def press(self, key: str) -> None:
        """Type one printable key into the terminal (its hidden textarea has the focus)."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea')?.focus(), true")
        await self.send("Input.dispatchKeyEvent", type="keyDown", key=key, text=key)
        await self.send("Input.dispatchKeyEvent", type="keyUp", key=key)

    async def ctrl(self, letter: str) -> None:
        """Press Ctrl and a letter (xterm.js turns it into the control character)."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea')?.focus(), true")
        upper = letter.upper()
        key = {"key": letter, "code": f"Key{upper}", "windowsVirtualKeyCode": ord(upper)}
        await self.send("Input.dispatchKeyEvent", type="keyDown", modifiers=2, **key)
        await self.send("Input.dispatchKeyEvent", type="keyUp", modifiers=2, **key)

    async def type_text(self, text: str) -> None:
        """Type ``text`` into the terminal."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea')?.focus(), true")
        await self.send("Input.insertText", text=text)

    async def enter(self) -> None:
        """Press Enter (into the terminal: its hidden textarea has the focus)."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea')?.focus(), true")
        enter = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        await self.send("Input.dispatchKeyEvent", type="keyDown", text="\r", **enter)
        await self.send("Input.dispatchKeyEvent", type="keyUp", **enter)

    async def location(self) -> str:
        """The page's current URL."""
        return str(await self.evaluate("window.location.href"))

    async def screenshot(self, path: Path) -> int:
        """Save a PNG of the page; its size in bytes."""
        r = await self.send("Page.captureScreenshot", format="png")
        data = base64.b64decode(r["data"])
        path.write_bytes(data)
        return len(data)

    async def close(self) -> None:
        """Close the DevTools socket."""
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


@contextlib.asynccontextmanager
async def browser_page(binary: str) -> AsyncIterator[Page]:
    """A fresh headless Chromium (its own empty profile) and one tab on ``about:blank``; the
    browser is killed and its profile removed on exit."""
    profile = tempfile.mkdtemp(prefix="sofa-top-chromium-")
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port = await _devtools_port(Path(profile), proc)
        async with aiohttp.ClientSession() as http:
            targets = await _page_targets(http, port)
            ws = await http.ws_connect(targets[0]["webSocketDebuggerUrl"], max_msg_size=0)
            page = Page(ws)
            try:
                yield page
            finally:
                await page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


async def _devtools_port(profile: Path, proc: subprocess.Popen[bytes]) -> int:
    # Chromium writes the port it picked (--remote-debugging-port=0) to DevToolsActivePort.
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before it listened")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(marker.read_text().split()[0])
        await asyncio.sleep(0.1)
    raise TimeoutError("chromium did not open its DevTools port in 60 s")


async def _page_targets(http: aiohttp.ClientSession, port: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = [t for t in await r.json() if t.get("type") == "page"]
        if targets or time.monotonic() > deadline:
            if not targets:
                raise RuntimeError("chromium has no page target")
            return targets
        await asyncio.sleep(0.1)
