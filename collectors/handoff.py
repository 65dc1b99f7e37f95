"""Writing files into a directory that another uid owns, following nothing that uid put there.

sofa-top as root hands an attach's socket directory to the target's uid (so that its agent can
connect) and then writes the payload and a copy of the agent into it. The target owns the
directory and may rename it or plant links inside it at any moment; a path-based write (or
``chmod``) by root would follow such a link anywhere. So everything here is relative to a
directory descriptor opened with ``O_NOFOLLOW``, every file and directory is created anew
(``O_EXCL``: one already there is not ours), and modes are set on descriptors.
"""

from __future__ import annotations

import os
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir(path: Path, dir_fd: int | None = None) -> int:
    """A descriptor of directory ``path`` that is no symbolic link. Raises OSError."""
    return os.open(path, _DIR, dir_fd=dir_fd)


def write_new(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Create file ``name`` in ``dir_fd`` (it must not exist) holding ``data``. Raises OSError."""
    fd = os.open(name, _NEW, 0o600, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def make_dirs(dir_fd: int, *names: str) -> int:
    """Create the new directories ``names``, each inside the one before, 0755; a descriptor of
    the last (the caller closes it). Raises OSError."""
    fd = dir_fd
    for name in names:
        os.mkdir(name, 0o700, dir_fd=fd)
        inner = open_dir(Path(name), fd)
        if fd != dir_fd:
            os.close(fd)
        fd = inner
        os.fchmod(fd, 0o755)
    return fd


def copy_tree(src: Path, dir_fd: int, name: str, skip: tuple[str, ...] = ("__pycache__",)) -> None:
    """Copy directory ``src`` (sofa-top's own files) to ``name`` in ``dir_fd``, directories
    0755 and files 0644, leaving out the names in ``skip``. Raises OSError."""
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = open_dir(Path(name), dir_fd)
    try:
        os.fchmod(fd, 0o755)
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            if entry.name in skip or entry.is_symlink():
                continue
            if entry.is_dir():
                copy_tree(Path(entry.path), fd, entry.name, skip)
            elif entry.is_file():
                write_new(fd, entry.name, Path(entry.path).read_bytes())
    finally:
        os.close(fd)
