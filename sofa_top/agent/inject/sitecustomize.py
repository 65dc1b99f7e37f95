"""Injected by ``sofa-top launch``, first on the workload's PYTHONPATH.

Runs the workload's own ``sitecustomize`` (the next one on ``sys.path``), then starts the agent.
Nothing here may break the workload: agent failures become one line on stderr.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys

_INJECT_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_DIR = os.path.dirname(os.path.dirname(_INJECT_DIR))  # the sofa_top package


def _same(a: str, b: str) -> bool:
    return os.path.normcase(os.path.abspath(a or os.curdir)) == os.path.normcase(b)


def _chain() -> None:
    """Exec the next sitecustomize on sys.path, reporting its errors the way site.py does."""
    import importlib.machinery
    import importlib.util

    # our directory is no longer needed on sys.path; leaving it would only shadow user modules
    sys.path[:] = [p for p in sys.path if not _same(p, _INJECT_DIR)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # whoever imports sitecustomize later gets the workload's own module, not ours
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                f"{err.__class__.__name__}: {err}\n"
            )


def _make_importable() -> None:
    """Make ``sofa_top.agent`` importable without adding anything to sys.path.

    When the workload's Python does not find this very copy of sofa_top (another virtualenv),
    a bare ``sofa_top`` package pointing at our directory is registered (``importable.py``,
    shared with the attach bootstrap and loaded by path).
    """
    path = os.path.join(_INJECT_DIR, "importable.py")
    spec = importlib.util.spec_from_file_location("_sofa_top_importable", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    helper.make_importable(_PACKAGE_DIR)


def _start() -> None:
    if not os.environ.get("SOFA_TOP_SOCKET"):
        return
    try:
        _make_importable()
        from sofa_top.agent import boot

        boot.start()
    except Exception as e:
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"sofa-top agent: failed to start ({e!r}); running without telemetry\n"
            )


try:
    _chain()
finally:
    _start()
