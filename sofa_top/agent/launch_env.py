"""Environment that makes a child Python load the agent (used by ``sofa-top launch``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sofa_top.agent.settings import ENV_SETTINGS, ENV_SOCKET

INJECT_DIR = Path(__file__).resolve().parent / "inject"


def agent_env(
    socket_path: Path | str,
    settings: Mapping[str, Any] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables to add to the child's environment (merge them over ``os.environ``).

    ``PYTHONPATH`` gets the inject directory first (its ``sitecustomize`` starts the agent and
    then runs any other ``sitecustomize``), followed by the existing entries of ``base``
    (default: ``os.environ``). Only the inject directory is added: the agent package is loaded
    from its own location by ``sitecustomize``, so that sofa-top's site-packages never shadow
    the workload's own.
    """
    env = os.environ if base is None else base
    parts = [str(INJECT_DIR)]
    existing = env.get("PYTHONPATH", "")
    if existing:
        # empty entries mean "the current directory" to Python: keep them as they were
        parts += [p for p in existing.split(os.pathsep) if p != str(INJECT_DIR)]
    return {
        "PYTHONPATH": os.pathsep.join(parts),
        ENV_SOCKET: str(socket_path),
        ENV_SETTINGS: json.dumps(dict(settings or {}), separators=(",", ":")),
    }
