"""Where sofa-top keeps its data, and where it finds py-spy. Pure: nothing is created here."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def data_dir() -> Path:
    """$SOFA_TOP_DATA_DIR, else $XDG_DATA_HOME/sofa-top, else ~/.local/share/sofa-top."""
    explicit = os.environ.get("SOFA_TOP_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()
    # The XDG spec says an empty value counts as unset.
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg).expanduser() / "sofa-top"
    return Path.home() / ".local" / "share" / "sofa-top"


def sessions_dir() -> Path:
    """Recorded sessions: data_dir()/sessions."""
    return data_dir() / "sessions"


def py_spy_path() -> str | None:
    """The py-spy executable: next to sys.executable first (the one installed with sofa-top in
    its virtualenv, which need not be on PATH), then on PATH."""
    # Not resolving symlinks on purpose: a venv's python links into the base interpreter's
    # directory, but py-spy was installed into the venv's bin.
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")
