"""Where sofa-top keeps its data. Pure: nothing is created here."""

from __future__ import annotations

import os
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
