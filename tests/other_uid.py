"""Running sofa-top and its targets as another user (``nobody``), from any clone.

The tests that drop to another uid (ptrace denied, a PID you may not trace, an unwritable
session directory, another uid knocking on the agent's socket) cannot use the checkout's
``.venv``: in a clone inside a 0700 directory (root's home on Debian is one) ``nobody`` reaches
neither ``.venv/bin/sofa-top`` nor the site-packages nor the workload scripts, and pyenv's
interpreter under ``/root`` neither. So a session fixture stages a world-readable copy of what
that user runs in a fresh ``/tmp`` directory: sofa-top's own package (symlinks resolved), the
third-party distributions it imports at run time (found by importing them, not listed by hand;
hard-linked where the file system allows), py-spy, and the test scripts that run as that user;
plus an interpreter that user can execute (same Python minor version, for the compiled
extensions). Where there is none, the tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
USER = "nobody"
GROUP = "nogroup"
UID = 65534

# What sofa-top imports at run time in the modes that run as another user (record, attach,
# launch, doctor); their third-party imports are found by importing these in a subprocess.
RUNTIME_MODULES = (
    "sofa_top.cli.main",
    "sofa_top.cli.doctor",
    "sofa_top.recording.hub",
    "sofa_top.recording.report",
    "sofa_top.recording.store",
    "sofa_top.collectors.process",
    "sofa_top.collectors.stacks",
    "sofa_top.collectors.gpu",
    "sofa_top.collectors.agent",
    "sofa_top.collectors.logs",
    "sofa_top.collectors.inject",  # attach injects the agent (hypno)
    "hypno",
    "sofa_top.recording.reader",
    "sofa_top.metrics.exporter",  # prometheus_client
    "sofa_top.agent.launch_env",
    "sofa_top.optimizers.compare",  # the CLI builds its parser from it
    "sofa_top.tui.app",
)
# Scripts that run as the other user, copied next to sofa-top.
SCRIPTS = (
    REPO / "tests" / "faults" / "fault_target.py",
    REPO / "tests" / "faults" / "attach_target.py",
)

# Prints the files (relative to site-packages) of every installed distribution that the given
# modules import, with all their files (a wheel's ``numpy.libs`` is no module, but is needed).
_FIND_FILES = """
import importlib, sys, sysconfig
from importlib import metadata
from pathlib import Path
for name in sys.argv[1:]:
    importlib.import_module(name)
roots = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
tops = set()
for mod in list(sys.modules.values()):
    f = getattr(mod, "__file__", None)
    if f:
        p = Path(f).resolve()
        tops.update(p.relative_to(r).parts[0].split(".")[0] for r in roots if r in p.parents)
dists = metadata.packages_distributions()
names = {d for top in tops for d in dists.get(top, ())}
for name in sorted(names):
    dist = metadata.distribution(name)
    for f in dist.files or ():
        path = Path(dist.locate_file(f)).resolve()
        for r in roots:
            if r in path.parents and path.is_file() and "__pycache__" not in path.parts:
                print(r, path.relative_to(r), sep="\t")
"""


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link where the file system allows it (torch alone is 750 MB), else a copy. The
    link's permission is the file's own mode; the directories on the new path are ours."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def setpriv(user: str = USER, group: str = GROUP) -> list[str]:
    """The argv prefix that runs a command as ``user``, with no supplementary groups."""
    return ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups"]


def _runs_as(user: str, python: str) -> bool:
    """Whether ``user`` can start ``python`` the way a child of that user would (through a
    shell, so that every directory on the way is checked) and it is our Python version."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    probe = 'exec "$0" -I -c "import sys; print(\'%d.%d\' % sys.version_info[:2])"'
    try:
        out = subprocess.run(
            [*setpriv(user), "/bin/sh", "-c", probe, python],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == want


def interpreter_for(user: str) -> str | None:
    """A Python of our minor version that ``user`` can execute, or None."""
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    base = getattr(sys, "_base_executable", sys.executable)
    candidates = [os.path.realpath(base), f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"]
    candidates += [p for p in (shutil.which(minor), shutil.which("python3")) if p]
    seen: set[str] = set()
    for c in candidates:
        if c in seen or not os.path.isfile(c):
            continue
        seen.add(c)
        if _runs_as(user, c):
            return c
    return None


def unavailable() -> str | None:
    """Why tests cannot run things as another user here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root to switch to another user"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to switch users"
    return None


@dataclass
class OtherUser:
    """A world-readable staging of sofa-top for ``user`` (see the module docstring)."""

    root: Path
    python: str
    user: str = USER
    uid: int = UID
    scripts: dict[str, Path] = field(default_factory=dict)

    @property
    def site(self) -> Path:
        return self.root / "site"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def py_spy(self) -> str:
        return str(self.bin / "py-spy")

    def script(self, name: str) -> str:
        """The world-readable copy of a staged script (by file name)."""
        return str(self.scripts[name])

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a process of this user: ours, pointed at the staged copy."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("VIRTUAL_ENV", "PYTHONHOME", "SOFA_TOP_SOCKET", "SOFA_TOP_AGENT_SETTINGS")
        }
        env.update(
            PYTHONPATH=str(self.site),
            PYTHONNOUSERSITE="1",
            PYTHONDONTWRITEBYTECODE="1",
            PATH=f"{self.bin}:/usr/local/bin:/usr/bin:/bin",
        )
        env.update(extra or {})
        return env

    def argv(self, argv: Sequence[str | bytes]) -> list[str | bytes]:
        """``argv`` run as this user."""
        return [*setpriv(self.user), *argv]

    def sofa_top(self, *args: str) -> list[str]:
        """The argv of the staged ``sofa-top ARGS`` run as this user."""
        return [*setpriv(self.user), str(self.bin / "python"), "-m", "sofa_top", *args]

    def python_argv(self, *args: str) -> list[str]:
        """The argv of the staged interpreter run as this user."""
        return [*setpriv(self.user), str(self.bin / "python"), *args]

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def stage(user: str = USER) -> OtherUser | str:
    """Stage sofa-top for ``user``; a string says why it cannot be done here."""
    reason = unavailable()
    if reason is not None:
        return reason
    python = interpreter_for(user)
    if python is None:
        return (
            f"no Python {sys.version_info[0]}.{sys.version_info[1]} that user {user!r} may "
            f"execute (this one is {os.path.realpath(sys.executable)}, behind directories "
            f"{user!r} cannot enter); install python3 system-wide"
        )
    from sofa_top.collectors.stacks import find_pyspy

    spy = find_pyspy()
    if spy is None:
        return "py-spy is not installed"
    found = subprocess.run(
        [sys.executable, "-c", _FIND_FILES, *RUNTIME_MODULES],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    root = Path(tempfile.mkdtemp(prefix=f"sofa-top-{user}-", dir="/tmp"))
    staged = OtherUser(root, python, user)
    try:
        staged.site.mkdir()
        staged.bin.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for line in found.stdout.splitlines():
            base, rel = line.split("\t")
            dst = staged.site / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            _link_or_copy(os.path.join(base, rel), str(dst))
        # sofa_top itself, with its collectors/optimizers/tui symlinks resolved
        shutil.copytree(REPO / "sofa_top", staged.site / "sofa_top", ignore=ignore)
        shutil.copy2(spy, staged.py_spy)
        (staged.bin / "python").symlink_to(python)
        (root / "scripts").mkdir()
        for script in SCRIPTS:
            copy = root / "scripts" / script.name
            shutil.copy2(script, copy)
            staged.scripts[script.name] = copy
        for dirpath, _, filenames in os.walk(root):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                path = os.path.join(dirpath, name)
                mode = os.lstat(path).st_mode
                # a hard-linked file is the venv's own: only ever widen its mode to readable
                if not os.path.islink(path) and mode & 0o444 != 0o444:
                    os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 else 0))
    except BaseException:
        staged.remove()
        raise
    check = subprocess.run(
        staged.sofa_top("--version"),
        env=staged.env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if check.returncode != 0:
        staged.remove()
        return f"the staged sofa-top does not start as {user!r}: {check.stderr.strip()[-500:]}"
    return staged


__all__ = ["UID", "USER", "OtherUser", "setpriv", "stage"]
