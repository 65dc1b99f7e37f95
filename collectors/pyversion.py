"""Which Python a process runs, told from what can be read and without executing anything of it.

sofa-top often runs as root: running a target's executable to ask its version (even as the
target's user, through ``ldd`` or through its ELF interpreter) would run whatever that file
is. So, as py-spy does, it reads instead: ``/proc/PID/maps`` names the mapped libraries
(``libpython3.X.so``, ``libpypy3.X-c.so``), and the executable (``/proc/PID/exe``, opened as a
file) or the mapped libpython holds the interpreter's exported symbols. CPython 3.11+ exports
``Py_Version``, a constant ``PY_VERSION_HEX`` whose bytes lie in the file; an older CPython
exports ``PyGILState_Ensure`` but no ``Py_Version`` (its version is then read from the
library's name or its ``PY_VERSION`` string); PyPy's symbols start with ``PyPy``. A process
none of that says is Python is not one sofa-top injects into.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import BinaryIO, Literal

from sofa_top.collectors.elf import ElfError, ElfFile, open_regular

NotToldKind = Literal["not-python", "unsupported", "exited", "denied"]

_LIBPYTHON = re.compile(rb"^libpython(\d+)\.(\d+)[a-z]*\.so")
_LIBPYPY = re.compile(rb"^libpypy(\d+)?(?:\.(\d+))?.*\.so")
# PY_VERSION as a C string in .rodata: "3.10.13", "3.9.0rc1", "3.10.4+"; the linker may have
# merged it into the tail of a longer one ("/tmp/python-build/Python-3.10.13")
_PY_VERSION = re.compile(rb"(?<![\d.])([23])\.(\d{1,2})\.\d{1,2}(?:(?:a|b|rc)\d{1,2})?\+?\x00")
_CPYTHON_API = ("PyGILState_Ensure", "PyGILState_Release", "PyRun_SimpleString")
_WANTED = frozenset({*_CPYTHON_API, "Py_Version"})


@dataclass(frozen=True, slots=True)
class TargetPython:
    """The implementation and version of a target's interpreter, and where they were read."""

    implementation: str  # "cpython", "pypy"
    version: tuple[int, int]
    source: str = ""  # for people: "Py_Version in /usr/lib/libpython3.11.so.1.0"

    def __str__(self) -> str:
        return f"{self.implementation} {self.version[0]}.{self.version[1]}"


@dataclass(frozen=True, slots=True)
class NotTold:
    """Why no supported Python could be told: not a Python, one the agent does not run in,
    gone, or unreadable; ``reason`` is one line for people."""

    kind: NotToldKind
    reason: str


@dataclass(frozen=True, slots=True)
class _Mapped:
    path: bytes
    inode: int
    span: str  # "start-end" of its first mapping: its name under /proc/PID/map_files


def identify(pid: int) -> TargetPython | NotTold:
    """What Python ``pid`` runs, read from /proc and its files; nothing of it is executed."""
    try:
        mapped = _mapped_files(pid)
        exe = open_regular(f"/proc/{pid}/exe")
    except (FileNotFoundError, ProcessLookupError):
        return NotTold("exited", f"PID {pid} has exited")
    except PermissionError:
        return NotTold("denied", f"cannot read PID {pid}'s executable or maps (permission denied)")
    except OSError as e:
        return NotTold("not-python", f"PID {pid}'s executable cannot be read: {e}")
    exe_name = _exe_name(pid)
    pypy = next((m for m in mapped if _LIBPYPY.match(os.path.basename(m.path))), None)
    if pypy is not None:
        return _pypy(os.path.basename(pypy.path), f"{_show(pypy.path)} is mapped")
    libpython = next((m for m in mapped if _LIBPYTHON.match(os.path.basename(m.path))), None)
    with exe:
        found = python_in_elf(exe, exe_name)
    if found is None and libpython is not None:
        lib = _open_mapped(pid, libpython)
        if lib is not None:
            with lib:
                found = python_in_elf(lib, _show(libpython.path))
    if isinstance(found, TargetPython | NotTold):
        return found
    if libpython is not None:  # its name says the version; its file could not be read
        m = _LIBPYTHON.match(os.path.basename(libpython.path))
        assert m is not None
        version = (int(m[1]), int(m[2]))
        return TargetPython("cpython", version, f"{_show(libpython.path)} is mapped")
    return NotTold(
        "not-python",
        f"PID {pid} is not Python: {exe_name} exports no Python interpreter "
        "(no Py_Version or PyGILState_Ensure symbol) and maps no libpython",
    )


def python_in_elf(f: BinaryIO, name: str) -> TargetPython | NotTold | None:
    """What the ELF file ``f`` (called ``name``) says: a Python, one no agent runs in, or None
    when it is no Python interpreter (it defines none of CPython's API)."""
    # .dynsym only: CPython exports its API there for extension modules, and a full .symtab
    # (tens of MB in a large program) would make telling a non-Python costly
    try:
        elf = ElfFile(f)
        symbols, pypy = {}, False
        for sym in elf.symbols(dynamic=True):
            if sym.defined and sym.name in _WANTED:
                symbols[sym.name] = sym
            pypy = pypy or (sym.defined and sym.name.startswith(("PyPy", "pypy_g_")))
    except (ElfError, OSError, ValueError):
        return None
    if pypy:
        return _pypy(os.path.basename(name).encode(), f"{name} exports PyPy's symbols")
    if not all(n in symbols for n in _CPYTHON_API):
        return None
    version = symbols.get("Py_Version")
    if version is not None:
        hexversion = elf.uint32_at(version.value)
        if hexversion is not None and hexversion >> 24 == 3:
            return TargetPython("cpython", (3, hexversion >> 16 & 0xFF), f"Py_Version in {name}")
        return NotTold("unsupported", f"{name}'s Py_Version ({hexversion}) is not a Python 3's")
    # an older CPython (Py_Version is 3.11's): its library's name or PY_VERSION string say
    # which, for the message
    m = _LIBPYTHON.match(os.path.basename(name).encode())
    if m is not None:
        return TargetPython("cpython", (int(m[1]), int(m[2])), f"the name {name}")
    old = py_version_string(elf)
    if old is not None:
        return TargetPython("cpython", old, f"PY_VERSION in {name}")
    return NotTold("unsupported", f"{name} is a CPython older than 3.11 (it has no Py_Version)")


def py_version_string(elf: ElfFile) -> tuple[int, int] | None:
    """Major and minor of the first PY_VERSION-like string in ``elf``'s .rodata."""
    rodata = elf.section(".rodata")
    try:
        m = _PY_VERSION.search(elf.section_bytes(rodata)) if rodata is not None else None
    except (ElfError, OSError):
        return None
    return None if m is None else (int(m[1]), int(m[2]))


def _pypy(libname: bytes, source: str) -> TargetPython | NotTold:
    m = _LIBPYPY.match(libname)
    if m is not None and m[1] and m[2]:
        return TargetPython("pypy", (int(m[1]), int(m[2])), source)
    return NotTold("unsupported", f"PyPy ({source}) is not CPython: the agent runs in CPython only")


def _mapped_files(pid: int) -> list[_Mapped]:
    """The files ``pid`` maps, in order, each once. Raises OSError."""
    seen: dict[bytes, _Mapped] = {}
    with open(f"/proc/{pid}/maps", "rb") as f:
        for line in f:
            # start-end perms offset major:minor inode path
            parts = line.rstrip(b"\n").split(None, 5)
            if len(parts) < 6 or not parts[5].startswith(b"/") or parts[4] == b"0":
                continue
            with contextlib.suppress(ValueError):
                inode = int(parts[4])
                seen.setdefault(parts[5], _Mapped(parts[5], inode, parts[0].decode("ascii")))
    return list(seen.values())


def _open_mapped(pid: int, m: _Mapped) -> BinaryIO | None:
    """The mapped file itself, opened for reading: through map_files (which needs
    CAP_SYS_ADMIN) or by its path in the target's root; only when it is the very inode the
    target maps (the path may name another file since, or a link the target planted). The
    device is not compared: maps shows an overlay's lower device, fstat the overlay's."""
    for path in (f"/proc/{pid}/map_files/{m.span}", f"/proc/{pid}/root{os.fsdecode(m.path)}"):
        try:
            f = open_regular(path)
        except OSError:
            continue
        if os.fstat(f.fileno()).st_ino == m.inode:
            return f
        f.close()
    return None


def _exe_name(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return f"/proc/{pid}/exe"


def _show(path: bytes) -> str:
    return os.fsdecode(path)
