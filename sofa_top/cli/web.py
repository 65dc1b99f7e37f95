"""``sofa-top serve`` and ``sofa-top launch --web``: the home screen or one dashboard in a
browser (textual-serve). This process is the owner of every workload its pages show
(``sofa_top.web``): it prints the page's URL, serves until a page stops the run (``launch
--web``) or until Ctrl-C / SIGTERM / SIGHUP, and then stops what it started, once."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys
from typing import TYPE_CHECKING, Any

from sofa_top.cli.watch import finished, launch_request, opened_attach
from sofa_top.collectors import children
from sofa_top.datamodel.errors import UserError
from sofa_top.launch import AttachRequest, LaunchRequest, Run, Sampling, open_launch

if TYPE_CHECKING:
    from sofa_top.web.owner import Owner
    from sofa_top.web.server import TokenServer

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _need_textual_serve() -> None:
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        raise UserError(
            "the browser view needs textual-serve: pip install 'sofa-top[web]'"
        ) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _listen(args: argparse.Namespace) -> tuple[Any, str, str]:
    from sofa_top.web.server import bind, new_token, page_url

    sock = bind(args.host, args.port)
    token = new_token()
    if not is_loopback(args.host):
        print(
            f"sofa-top: warning: serving on {args.host}, not this machine only: whoever reaches "
            "it with the URL (its token) can watch, launch and stop workloads, over plain HTTP "
            "(an SSH tunnel to 127.0.0.1 is safer)",
            file=sys.stderr,
        )
    return sock, token, page_url(sock, args.host, token)


def serve(args: argparse.Namespace) -> int:
    """``sofa-top serve``: the home screen in a browser; each attach or launch from a page is a
    run of this process."""
    _need_textual_serve()
    from sofa_top.web.owner import Owner
    from sofa_top.web.server import TokenServer

    def open_run(req: dict[str, Any]) -> Run:
        if req.get("action") == "launch":
            argv = req.get("argv")
            if not isinstance(argv, list) or not argv:
                raise UserError("launch needs a command")
            return open_launch(LaunchRequest(cmd=tuple(str(a) for a in argv)))
        pid = req.get("pid")
        if not isinstance(pid, int):
            raise UserError("attach needs a PID")
        return opened_attach(AttachRequest(pid=pid, sampling=Sampling()))

    def opener(req: dict[str, Any]) -> Run:
        # The server's terminal is its log: what a page asked for and what came of it (a toast
        # in the page lasts seconds, and the one who serves may not be the one who clicked).
        # ("sofa-top:" starts the lines that are problems, as in the CLI's other messages)
        what = page_request(req)
        _log(f"a page asks to {what}")
        try:
            run = open_run(req)
        except (UserError, OSError) as exc:
            _log(f"sofa-top: could not {what}: {exc}")
            raise UserError(str(exc)) from None
        _log(f"{what}: started, pid {run.target.pid}")
        return run

    sock, token, url = _listen(args)
    children.prepare()  # a page's run is guarded the moment the owner adds it
    owner = Owner(f"/{token}/", opener)
    server = TokenServer(sock, token, owner.view_command, "sofa-top")
    asyncio.run(_serve(owner, server, url, single=False))
    return 0


def page_request(req: dict[str, Any]) -> str:
    """What a page's open request asks for, in words."""
    if req.get("action") == "launch":
        argv = req.get("argv")
        shown = " ".join(map(str, argv)) if isinstance(argv, list) else repr(argv)
        return f"launch {shown}"
    return f"attach to PID {req.get('pid')}"


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def launch_web(args: argparse.Namespace) -> int:
    """``sofa-top launch --web -- CMD``: start CMD once and serve its dashboard; a page's
    confirmed ``q`` or a signal here stops it."""
    _need_textual_serve()
    from sofa_top.web.owner import Owner, View
    from sofa_top.web.server import TokenServer

    req = launch_request(args)
    sock, token, url = _listen(args)  # a port in use stops us before the workload starts
    children.prepare()  # the owner guards the workload the moment it is added
    try:
        run = open_launch(req)
    except BaseException:
        sock.close()
        raise
    owner = Owner(f"/{token}/")
    title = f"sofa-top: {' '.join(req.cmd)}"[:80]
    server = TokenServer(sock, token, owner.view_command, title)
    rid = owner.add(run)
    owner.default_view = View("run", rid)
    asyncio.run(_serve(owner, server, url, single=True))
    return finished(run)


async def _serve(owner: Owner, server: TokenServer, url: str, *, single: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reason: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        reason.append(sig.name)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await owner.start()
        await server.start()
        what = "the dashboard" if single else "sofa-top"
        print(f"serving {what} at {url}", file=sys.stderr, flush=True)
        print(
            "open it in a browser; Ctrl-C here stops "
            + ("the workload and the server" if single else "every run and the server"),
            file=sys.stderr,
            flush=True,
        )
        waits = [asyncio.ensure_future(stop.wait())]
        if single:
            waits.append(asyncio.ensure_future(owner.run_ended.wait()))
        _done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
    finally:
        await owner.finish_all(reason[0] if reason else "user quit")
        await server.close()
        await owner.close()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
