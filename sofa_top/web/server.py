"""textual-serve behind a token: every page, websocket and static file lives under ``/TOKEN/``
(the URL sofa-top prints), and any other path is refused. The token is never in a command line
(``/proc/PID/cmdline`` is world-readable): only on the owner's terminal and in the URL.

Pages: ``/TOKEN/`` (the owner's default view) and ``/TOKEN/view/ID/``; each page's websocket
(``.../ws``) runs the viewer command the owner gives for that view (``Owner.view_command``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import shlex
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from sofa_top.collectors import children
from sofa_top.datamodel.errors import UserError

DEFAULT_WEB_HOST = "127.0.0.1"
VIEWER_QUIT_S = 10.0
ViewCommand = Callable[[str | None], "list[str] | None"]
log = logging.getLogger("sofa-top.web")


def new_token() -> str:
    """A URL-safe secret (192 bits)."""
    return secrets.token_urlsafe(24)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now, so that a port in use stops sofa-top before it starts
    anything (UserError)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"cannot serve on {host}: {exc.strerror}") from None
    family, _type, _proto, _name, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def page_url(sock: socket.socket, host: str, token: str) -> str:
    """The URL to print: the bound port, the token; a wildcard host shown as this machine."""
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else "[::1]" if host == "::" else host
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/{token}/"


async def _stop(service: AppService) -> None:
    """Ask the page's viewer to quit and wait for it; kill it when it does not (it holds no
    workload: the owner does), whatever interrupts the wait (the server's own shutdown
    cancels it)."""
    try:
        await asyncio.wait_for(service.stop(), VIEWER_QUIT_S)
    except (TimeoutError, ConnectionError):
        pass
    finally:
        process = service._process  # textual-serve keeps no public handle on it
        if process is not None:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.shield(process.wait())
            children.release(process.pid)


class TokenServer(Server):
    """textual-serve's ``Server`` with the token prefix and one viewer command per view."""

    def __init__(self, sock: socket.socket, token: str, commands: ViewCommand, title: str) -> None:
        host, port = sock.getsockname()[:2]
        super().__init__("sofa-top", host=str(host), port=int(port), title=title)
        self.sock = sock
        self.token = token
        self.commands = commands
        self._runner: web.AppRunner | None = None

    def _authorized(self, request: web.Request) -> bool:
        first = request.path.lstrip("/").split("/", 1)[0]
        return hmac.compare_digest(first.encode(), self.token.encode())

    async def _make_app(self) -> web.Application:
        @web.middleware
        async def token_only(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if not self._authorized(request):
                return web.Response(
                    status=403, text="sofa-top: this address needs the URL sofa-top printed\n"
                )
            return await handler(request)

        app = web.Application(middlewares=[token_only])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        t = self.token
        app.add_routes(
            [
                web.get(f"/{t}/", self.handle_index, name="index"),
                web.get(f"/{t}/ws", self.handle_websocket, name="websocket"),
                web.get(f"/{t}/view/{{view}}/", self.handle_index, name="view"),
                web.get(f"/{t}/view/{{view}}/ws", self.handle_websocket, name="view-ws"),
                web.static(f"/{t}/static", self.statics_path, name="static"),
            ]
        )
        return app

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """The page: textual-serve's template, its websocket under this page's path."""
        view = request.match_info.get("view")
        if self.commands(view) is None:
            raise web.HTTPNotFound(text="sofa-top: no such view (the server was restarted?)\n")
        ws_path = request.path.rstrip("/") + "/ws"
        context: dict[str, Any] = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"ws://{request.host}{ws_path}",
            "config": {"static": {"url": f"/{self.token}/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """A browser connected: run this view's viewer for it, relay until either side ends."""
        argv = self.commands(request.match_info.get("view"))
        if argv is None:
            raise web.HTTPNotFound()
        websocket = web.WebSocketResponse(heartbeat=15)
        if not websocket.can_prepare(request).ok:
            raise web.HTTPBadRequest(text="sofa-top: a websocket endpoint (the page opens it)\n")
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        service: AppService | None = None

        async def close() -> None:
            await websocket.close()

        try:
            await websocket.prepare(request)
            service = AppService(
                "exec " + shlex.join(argv),  # textual-serve runs it through a shell
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=close,
                download_manager=self.download_manager,
            )
            await service.start(width, height)
            if service._process is not None:
                children.guard(service._process.pid)  # ended even when this server is killed
            await self._process_messages(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as exc:  # one page failing must not stop the server
            log.warning("page connection failed: %s", exc)
        finally:
            if service is not None:
                await _stop(service)
        return websocket

    async def start(self) -> None:
        """Serve on the bound socket (returns once listening)."""
        self._runner = web.AppRunner(await self._make_app(), access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()

    async def close(self) -> None:
        """Close every page and stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
