"""Make ``sofa_top.agent`` importable in a workload's Python without touching ``sys.path``.

Loaded by file path (never imported by name) from the launch ``sitecustomize`` and from the
attach bootstrap, so that it works in an interpreter that has no sofa-top installed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types


def same_path(a: str, b: str) -> bool:
    """Whether two directory names are the same place (``""`` is the current directory)."""
    return os.path.normcase(os.path.abspath(a or os.curdir)) == os.path.normcase(b)


def make_importable(package_dir: str) -> bool:
    """Register a bare ``sofa_top`` package at ``package_dir`` unless this Python already finds
    that very copy; its ``__init__`` is not run and nothing from sofa-top's own site-packages
    becomes visible. Returns True when it registered one (attach mode removes it at detach)."""
    mod = sys.modules.get("sofa_top")
    if mod is not None:
        locations = list(getattr(mod, "__path__", []))
    else:
        try:
            spec = importlib.util.find_spec("sofa_top")
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if any(same_path(p, package_dir) for p in locations):
        return False
    if mod is not None:
        # the workload imported a sofa_top of its own: replacing it would break the workload
        raise ImportError(f"the workload already imported another sofa_top ({locations})")
    pkg = types.ModuleType("sofa_top", "sofa-top's agent package, injected by sofa-top")
    spec = importlib.machinery.ModuleSpec("sofa_top", None, is_package=True)
    spec.submodule_search_locations = [package_dir]
    pkg.__spec__ = spec
    pkg.__path__ = [package_dir]
    pkg.__package__ = "sofa_top"
    sys.modules["sofa_top"] = pkg
    return True
