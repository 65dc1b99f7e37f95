"""The ``sofa-top`` argument parser: every command and flag (the frozen interface)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from sofa_top import __version__
from sofa_top.cli.compare import add_compare_parser
from sofa_top.cli.diff import add_diff_parser
from sofa_top.datamodel.errors import UserError
from sofa_top.launch import (
    DEFAULT_INJECT_TIMEOUT_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_STACK_RATE_HZ,
    Sampling,
)
from sofa_top.metrics.cluster import DEFAULT_LOOKBACK_S
from sofa_top.metrics.spec import DEFAULT_HOST, MetricsSpec

WEB_HOST = "127.0.0.1"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not a usage dump."""

    _given: tuple[str, ...] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = tuple(args or ())
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        hint = self._option_like_file()
        self.exit(2, f"sofa-top: error: {message}{hint} (see '{self.prog} --help')\n")

    def _option_like_file(self) -> str:
        """What to write instead when an argument that reads as an option names a file
        (argparse takes ``-run.sofa`` for an unknown option, or for an option's missing value)."""
        for arg in self._given:
            if arg == "--":
                break
            if arg.startswith("--") or len(arg) < 3 or not arg.startswith("-"):
                continue
            if arg[:2] in self._option_string_actions:  # a short option with its value: -o./x
                continue
            if arg.endswith((".sofa", ".json")) or Path(arg).exists():
                return f"; '{arg}' reads as an option: for a file of that name write ./{arg}"
        return ""


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return v


def pid(text: str) -> int:
    """An argparse type: a process id."""
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}")
    return v


def port(text: str) -> int:
    """An argparse type: a TCP port (0: any free one)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {text!r}")
    return v


def metrics_of(args: argparse.Namespace) -> MetricsSpec | None:
    """The ``--metrics-port`` / ``--metrics-host`` flags (None: no metrics, the default)."""
    if args.metrics_port is None:
        if args.metrics_host is not None:
            raise UserError("--metrics-host needs --metrics-port")
        return None
    return MetricsSpec(port=args.metrics_port, host=args.metrics_host or DEFAULT_HOST)


def _metrics(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off by default)",
    )
    sp.add_argument(
        "--metrics-host",
        metavar="HOST",
        help=f"address the metrics port listens on (default {DEFAULT_HOST}: this machine only)",
    )


def sampling_of(args: argparse.Namespace) -> Sampling:
    """The ``--interval`` / ``--stack-rate`` / ``--no-stacks`` flags as a ``Sampling``."""
    return Sampling(
        interval_s=args.interval, stack_rate_hz=args.stack_rate, stacks=not args.no_stacks
    )


def _sampling(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--interval",
        type=positive_float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"process/system sampling interval in seconds (default {DEFAULT_INTERVAL_S})",
    )
    sp.add_argument(
        "--stack-rate",
        type=positive_float,
        default=DEFAULT_STACK_RATE_HZ,
        metavar="HZ",
        help="Python stack sampling rate; adapts down to stay within a CPU budget "
        f"(default {DEFAULT_STACK_RATE_HZ:g})",
    )
    sp.add_argument(
        "--no-stacks", action="store_true", help="do not sample Python stacks (no py-spy)"
    )
    sp.add_argument("-o", "--output", metavar="FILE", help="session file to write")


def _web(sp: argparse.ArgumentParser, *, flag: bool) -> None:
    if flag:
        sp.add_argument(
            "--web",
            action="store_true",
            help="serve the dashboard to a browser (textual-serve) instead of this terminal",
        )
    sp.add_argument(
        "--port",
        type=port,
        default=None if flag else 0,
        metavar="P",
        help="TCP port of the page (default: any free one; the URL is printed)",
    )
    sp.add_argument(
        "--host",
        default=None if flag else WEB_HOST,
        metavar="HOST",
        help=f"address to serve on (default {WEB_HOST}: this machine only; another one is "
        "reachable by others, with a warning)",
    )


def web_of(args: argparse.Namespace) -> bool:
    """``launch --web [--port P] [--host HOST]``: fills in the defaults; False without --web."""
    if not args.web:
        if args.port is not None or args.host is not None:
            raise UserError("--port and --host go with --web")
        return False
    args.port = 0 if args.port is None else args.port
    args.host = args.host or WEB_HOST
    return True


def _inject_flag(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--no-inject",
        action="store_true",
        help="do not inject the agent into the running process: stacks, /proc and GPU only",
    )
    sp.add_argument(
        "--inject-timeout",
        type=positive_float,
        default=DEFAULT_INJECT_TIMEOUT_S,
        metavar="S",
        help="give up injecting after S seconds (a job holding the GIL in a long C call; "
        f"default {DEFAULT_INJECT_TIMEOUT_S:g})",
    )


def _keep_running(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--keep-running",
        action="store_true",
        help="when sofa-top is stopped before the workload (terminal closed, SIGTERM, Ctrl-C "
        "for record), leave the workload running; default: stop it (SIGINT, SIGTERM, SIGKILL)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with all of sofa-top's commands."""
    p = Parser(prog="sofa-top", description="Live terminal profiler for deep-learning workloads.")
    p.add_argument("--version", action="version", version=f"sofa-top {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    a = sub.add_parser("attach", help="attach to a running process and open the live dashboard")
    a.add_argument("pid", type=pid, metavar="PID")
    _inject_flag(a)
    _sampling(a)
    _metrics(a)

    r = sub.add_parser(
        "record",
        help="record headless (no screen): --pid PID, or -- CMD to launch",
        usage="sofa-top record (--pid PID | -- CMD [ARGS...]) [options]",
    )
    r.add_argument("--pid", type=pid, metavar="PID")
    r.add_argument("--duration", type=positive_float, metavar="S", help="stop after S seconds")
    r.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    _inject_flag(r)
    r.add_argument("--name", help="session name, also the run label of its metrics")
    _keep_running(r)
    _sampling(r)
    _metrics(r)

    la = sub.add_parser(
        "launch",
        help="start CMD with the in-process agent and open the dashboard",
        usage="sofa-top launch [--name N] [-o FILE] [--keep-running] [--web [--port P] "
        "[--host HOST]] -- CMD [ARGS...]",
    )
    la.add_argument("--name", help="session name (default: the command)")
    _keep_running(la)
    _sampling(la)
    _metrics(la)
    _web(la, flag=True)

    sv = sub.add_parser(
        "serve",
        help="serve the home screen (attach, launch, replay) to a browser",
        usage="sofa-top serve [--port P] [--host HOST]",
        description="Serve sofa-top's home screen to a browser (textual-serve). The URL, with "
        "its access token, is printed; each attach or launch from a page is recorded by this "
        "process and runs on when the page closes; Ctrl-C stops them all.",
    )
    _web(sv, flag=False)

    d = sub.add_parser("demo", help="run a bundled input-bound workload under sofa-top")
    d.add_argument("framework", nargs="?", choices=("tf", "torch"), default="tf")
    d.add_argument("--seconds", type=positive_float, metavar="S", help="stop the demo after S s")
    d.add_argument(
        "--storage-ms",
        type=float,
        metavar="MS",
        help="simulated per-file storage latency (default 4; 0: a CPU-bound input stage)",
    )
    _keep_running(d)
    _sampling(d)

    e = sub.add_parser(
        "export", help="export a session for Perfetto, chrome://tracing or speedscope"
    )
    e.add_argument("session", metavar="SESSION", help="session file, name, or 'last'")
    e.add_argument(
        "--format", "-f", choices=("perfetto", "chrome", "speedscope"), default="perfetto"
    )
    e.add_argument(
        "-o", "--output", metavar="OUT", help="output file (default: beside the session)"
    )

    rp = sub.add_parser("replay", help="open a saved session read-only with a time cursor")
    rp.add_argument("session", metavar="SESSION", help="session file, name, or 'last'")

    ss = sub.add_parser("sessions", help="list saved sessions")
    ss.add_argument("--json", action="store_true", help="machine-readable list")
    ss.add_argument(
        "--prune",
        type=positive_float,
        metavar="DAYS",
        help="delete sessions older than DAYS (asks first)",
    )
    ss.add_argument("--yes", action="store_true", help="with --prune: do not ask")

    c = sub.add_parser(
        "cluster",
        help="the ranks and straggler verdict of every sofa-top a Prometheus server scrapes",
        usage="sofa-top cluster --prometheus URL [--run NAME] [--json]",
    )
    c.add_argument("--prometheus", required=True, metavar="URL", help="e.g. http://127.0.0.1:9090")
    c.add_argument("--run", metavar="NAME", help="only this run (a sofa-top session name)")
    c.add_argument("--json", action="store_true", help="print JSON once and exit")
    c.add_argument(
        "--lookback",
        type=positive_float,
        default=DEFAULT_LOOKBACK_S,
        metavar="S",
        help=f"the latest value of each series within S seconds (default {DEFAULT_LOOKBACK_S:g})",
    )
    sub.add_parser("doctor", help="check what sofa-top can see on this machine")
    add_compare_parser(sub)
    add_diff_parser(sub)
    return p
