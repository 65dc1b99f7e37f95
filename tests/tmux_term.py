"""A private tmux server with one 160x48 pane: the real terminal the tmux tests drive."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

WIDTH, HEIGHT = 160, 48
EXIT_MARK = "__SOFA_EXIT__"


class Tmux:
    """One private tmux server with one 160x48 pane running a command."""

    def __init__(self) -> None:
        self.socket = f"sofa-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        )
        return out.stdout

    def start(self, command: str) -> None:
        """Run ``command`` in the pane; when it ends, print its exit status and keep the pane."""
        # Under pytest the pane's shell starts with COLUMNS=80 LINES=24 in its environment, and
        # Textual trusts those over the real pane size.
        script = f"unset COLUMNS LINES; {command}; echo {EXIT_MARK} $?; sleep 600"
        env = [f"SOFA_TOP_DATA_DIR={os.environ['SOFA_TOP_DATA_DIR']}", "TERM=xterm-256color"]
        args = ["new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT)]
        for item in env:
            args += ["-e", item]
        self.tmux(*args, "bash", "-c", script)

    def screen(self) -> str:
        """What the pane shows now (wrapped lines joined)."""
        return self.tmux("capture-pane", "-p", "-J")

    def keys(self, *keys: str, literal: bool = False) -> None:
        """Type ``keys`` (tmux key names, or literal text)."""
        self.tmux("send-keys", *(["-l"] if literal else []), *keys)

    def wait_for(self, ready: Callable[[str], bool], timeout: float, what: str) -> str:
        """Poll the screen until ``ready``; on timeout fail with the last screen."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if ready(screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(
            f"timed out after {timeout:.0f}s waiting for {what}; screen:\n{screen}"
        )

    def kill(self) -> None:
        """Stop the server (and with it the pane's shell) and remove its socket file."""
        subprocess.run(
            ["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=15, check=False
        )
        # tmux leaves the socket file behind; one per test run would pile up in /tmp.
        tmpdir = os.environ.get("TMUX_TMPDIR") or "/tmp"
        Path(tmpdir, f"tmux-{os.getuid()}", self.socket).unlink(missing_ok=True)


def saved_session(screen: str) -> Path:
    match = re.search(r"session saved: (\S+)", screen)
    assert match, screen
    return Path(match.group(1))
