"""The attach bootstrap: what a running Python executes when ``sofa-top attach`` injects it.

The injector (``sofa_top.collectors.inject``) makes the target run one expression that starts a
thread executing this file by path, with ``ARGS`` in its globals; nothing is bound in the
target's ``__main__`` and nothing is added to its ``sys.path``. This file then checks the attach
token's deadline (a payload that ran late, because the target held the GIL in a long C call,
does nothing), makes ``sofa_top.agent`` importable from this very install, and starts an
attach-mode agent (``sofa_top.agent.boot.attach``). Stdlib only; never raises.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

_INJECT_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(os.path.dirname(_INJECT_DIR))  # the sofa_top package


def _say_failed(e: BaseException) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"sofa-top agent: attach failed ({e!r}); the job runs on untouched\n")


def prepare(args: dict[str, Any]) -> bool:
    """In the injected call itself: import the agent (see the module docstring); never raises.

    Importing in a thread of its own next to a thread that runs pure Python took over 30 s on a
    quiet machine: each of the hundreds of file reads an import makes releases the GIL, and
    getting it back waits for the busy thread's switch interval (5 ms). The injected call holds
    the GIL already, so the imports cost only their CPU (tens of ms, counted in the pause)."""
    if time.time() > float(args["deadline"]):
        return False
    t0 = time.perf_counter()
    try:
        before = set(sys.modules)
        helper_path = os.path.join(_INJECT_DIR, "importable.py")
        import importlib.util

        spec = importlib.util.spec_from_file_location("_sofa_top_importable", helper_path)
        if spec is None or spec.loader is None:
            return False
        helper = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(helper)
        helper.make_importable(_PACKAGE_DIR)
        import sofa_top.agent.boot  # noqa: F401 (imported here, started by main)

        args["added"] = tuple(
            m
            for m in sys.modules
            if m not in before and (m == "sofa_top" or m.startswith("sofa_top."))
        )
        args["prepare_s"] = time.perf_counter() - t0
        return True
    except BaseException as e:
        _say_failed(e)
        return False


def main(args: dict[str, Any]) -> str:
    """Start the agent, in a thread of its own (after ``prepare``); returns what happened."""
    cpu0 = time.thread_time()  # this thread's CPU: what the bootstrap holds the GIL for, at most
    try:
        if "added" not in args and not prepare(args):
            return "failed"
        from sofa_top.agent import boot

        added = tuple(args.get("added", ()))
        status = boot.attach(
            socket_path=str(args["socket"]),
            token=str(args["token"]),
            deadline=float(args["deadline"]),
            settings_json=args.get("settings"),
            added_modules=added,
            started_cpu=cpu0,
        )
        if status != "attached":
            # expired (it waited for the GIL past its deadline), unreachable or refused: the
            # agent's modules go again, as a detach takes them
            for name in added:
                sys.modules.pop(name, None)
        return status
    except BaseException as e:
        _say_failed(e)
        return "failed"


if __name__ == "__sofa_top_attach__" and prepare(globals()["ARGS"]):
    # run by the injected call: imported here (the GIL is held), the agent starts in a thread
    import _thread

    _thread.start_new_thread(main, (globals()["ARGS"],))
