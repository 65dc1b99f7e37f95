"""The ELF reader (``collectors.elf``) and what it tells of a file (``collectors.pyversion``), on
this machine's real interpreters and libraries, a compiled C program, and hand-built 32-bit and
big-endian files; each symbol table is checked against binutils' ``readelf``."""

from __future__ import annotations

import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from sofa_top.collectors.elf import ElfError, ElfFile, open_regular
from sofa_top.collectors.pyversion import NotTold, TargetPython, python_in_elf

READELF = shutil.which("readelf")
GCC = shutil.which("gcc")
_NAME_VERSION = re.compile(r"(?:lib)?python(\d+)\.(\d+)")


def _own_files() -> list[tuple[str, tuple[int, int]]]:
    """The running interpreter's binary and libpython, with the version this process runs."""
    own = sys.version_info[:2]
    files = [os.path.realpath(getattr(sys, "_base_executable", sys.executable))]
    libdir, lib = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and lib and os.path.isfile(os.path.join(libdir, lib)):
        files.append(os.path.join(libdir, lib))
    return [(f, own) for f in files]


def _named_files() -> list[tuple[str, tuple[int, int]]]:
    """System interpreters and libpythons, with the version their names say."""
    found = []
    patterns = ["/usr/bin/python3.*", "/usr/local/bin/python3.*", "/usr/lib/*/libpython3*.so.*"]
    for path in sorted({p for pat in patterns for p in glob.glob(pat)}):
        m = _NAME_VERSION.match(os.path.basename(path))
        if m and not path.endswith("-config") and not os.path.islink(path):
            found.append((path, (int(m[1]), int(m[2]))))
    return found


PYTHONS = _own_files() + [f for f in _named_files() if f[0] not in dict(_own_files())]


def _readelf_defined(path: str) -> dict[str, int]:
    """binutils' reading of a file's defined dynamic symbols: name -> value."""
    assert READELF is not None
    out = subprocess.run(
        [READELF, "--dyn-syms", "-W", path], capture_output=True, text=True, timeout=60
    ).stdout
    symbols = {}
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) >= 8 and f[0][:-1].isdigit() and f[6] != "UND":
            symbols[f[7].split("@")[0]] = int(f[1], 16)
    return symbols


def _ours_defined(path: str) -> dict[str, int]:
    with open_regular(path) as f:
        return {s.name: s.value for s in ElfFile(f).symbols() if s.defined}


def _identify_file(path: str) -> TargetPython | object:
    with open_regular(path) as f:
        return python_in_elf(f, path)


@pytest.mark.parametrize(("path", "version"), PYTHONS, ids=[p for p, _ in PYTHONS])
def test_real_interpreters_read_as_their_version(path: str, version: tuple[int, int]) -> None:
    """Each CPython file says its version: from Py_Version's bytes (3.11+, whose value is in
    the file) or, older, the library's name or PY_VERSION string; a statically linked
    executable's own symbols, or (shared) only its libpython's."""
    found = _identify_file(path)
    exports = "Py_Version" in _ours_defined(path) or "PyGILState_Ensure" in _ours_defined(path)
    if not exports:  # a shared build's executable: the API is in its libpython
        assert found is None, found
        return
    assert isinstance(found, TargetPython), found
    assert (found.implementation, found.version) == ("cpython", version), found
    if version >= (3, 11):
        assert found.source.startswith("Py_Version in "), found


@pytest.mark.skipif(READELF is None, reason="needs readelf (binutils) to check against")
@pytest.mark.parametrize(("path", "version"), PYTHONS, ids=[p for p, _ in PYTHONS])
def test_symbol_tables_agree_with_readelf(path: str, version: tuple[int, int]) -> None:
    del version
    theirs = _readelf_defined(path)
    assert theirs, path
    assert _ours_defined(path) == theirs


def test_an_older_cpython_reads_as_its_version() -> None:
    """A CPython before 3.11 exports no Py_Version: its version still reads (for the message),
    from its library's name or its PY_VERSION string."""
    libs = []
    for minor in range(6, 11):
        exe = shutil.which(f"python3.{minor}")
        if exe is None:
            continue
        out = subprocess.run(
            [exe, "-c", "import sysconfig as s; print(s.get_config_var('LIBDIR'), "
             "s.get_config_var('INSTSONAME'))"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if out.returncode == 0 and len(out.stdout.split()) == 2:
            lib = os.path.join(*out.stdout.split())
            if os.path.isfile(lib):
                libs.append((lib, (3, minor)))
    if not libs:
        pytest.skip("no CPython 3.6-3.10 with a shared libpython on PATH")
    for lib, version in libs:
        found = _identify_file(lib)
        assert isinstance(found, TargetPython) and found.version == version, (lib, found)
        assert "Py_Version" not in _ours_defined(lib)


@pytest.mark.skipif(GCC is None, reason="needs gcc to compile a C program")
def test_a_c_program_is_no_python(tmp_path: Path) -> None:
    assert GCC is not None
    src = tmp_path / "prog.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("python3"); return 0; }\n')
    exe = tmp_path / "python3"
    subprocess.run([GCC, "-O0", "-o", str(exe), str(src)], check=True, timeout=120)
    assert _identify_file(str(exe)) is None
    if READELF is not None:
        assert _ours_defined(str(exe)) == _readelf_defined(str(exe))


def test_what_is_no_elf_file(tmp_path: Path) -> None:
    script = tmp_path / "python3"
    script.write_text("#!/bin/sh\necho 3.11\n")
    with open_regular(str(script)) as f, pytest.raises(ElfError):
        ElfFile(f)
    assert _identify_file(str(script)) is None
    with pytest.raises(OSError):
        open_regular("/dev/null")  # a device is never read
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        open_regular(str(fifo))  # nor a FIFO (opening one to read would block)


PYPY = shutil.which("pypy3")


@pytest.mark.skipif(PYPY is None, reason="Debian's pypy3 is not installed (.ci/run installs it)")
def test_pypy_reads_as_pypy() -> None:
    assert PYPY is not None
    out = subprocess.run(
        [PYPY, "-c", "import sys; print(sys.executable)"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    exe = os.path.realpath(out.stdout.strip())
    where = [os.path.dirname(exe), "/usr/lib/*", "/usr/lib/pypy*/bin", "/usr/local/lib"]
    libs = [p for d in where for p in glob.glob(os.path.join(d, "libpypy*.so*"))]
    assert libs, f"no libpypy*.so next to {exe} or in /usr/lib"
    told = [_identify_file(path) for path in [exe, *libs]]
    assert not [t for t in told if getattr(t, "implementation", "") == "cpython"], told
    pypy = [t for t in told if getattr(t, "implementation", "") == "pypy"]
    pypy += [t for t in told if isinstance(t, NotTold) and "PyPy" in t.reason]
    assert pypy, told


# -- hand-built files: the 32-bit and big-endian layouts this machine has no binary of --------


def _elf(bits: int, endian: str, version_hex: int) -> bytes:
    """A minimal ELF shared object: .rodata holding Py_Version, .dynsym/.dynstr exporting it
    and CPython's GIL API, .shstrtab."""
    e = endian
    names = ["Py_Version", "PyGILState_Ensure", "PyGILState_Release", "PyRun_SimpleString"]
    dynstr = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    rodata_addr = 0x1000
    rodata = struct.pack(e + "I", version_hex) + b"\0" * 12
    sym_fmt = e + ("IBBHQQ" if bits == 64 else "IIIBBH")

    def sym(name_off: int, value: int, size: int) -> bytes:
        info = 0x11  # STB_GLOBAL, STT_OBJECT
        if bits == 64:
            return struct.pack(sym_fmt, name_off, info, 0, 1, value, size)
        return struct.pack(sym_fmt, name_off, value, size, info, 0, 1)

    dynsym = b"\0" * struct.calcsize(sym_fmt)
    off = 1
    for i, n in enumerate(names):
        dynsym += sym(off, rodata_addr + (0 if i == 0 else 4 * i), 4)
        off += len(n) + 1
    shstrtab = b"\0.rodata\0.dynstr\0.dynsym\0.shstrtab\0"
    ehsize, shentsize = (64, 64) if bits == 64 else (52, 40)
    body = [rodata, dynstr, dynsym, shstrtab]
    offsets = []
    pos = ehsize
    for b in body:
        offsets.append(pos)
        pos += len(b)
    shoff = (pos + 7) & ~7
    sh_fmt = e + ("IIQQQQIIQQ" if bits == 64 else "IIIIIIIIII")
    entsize = struct.calcsize(sym_fmt)
    headers = struct.pack(sh_fmt, *[0] * 10)
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    headers += struct.pack(sh_fmt, 1, 1, 2, rodata_addr, offsets[0], len(rodata), 0, 0, 4, 0)
    headers += struct.pack(sh_fmt, 9, 3, 2, 0, offsets[1], len(dynstr), 0, 0, 1, 0)
    headers += struct.pack(sh_fmt, 17, 11, 2, 0, offsets[2], len(dynsym), 2, 1, 8, entsize)
    headers += struct.pack(sh_fmt, 25, 3, 0, 0, offsets[3], len(shstrtab), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1 if e == "<" else 2, 1]) + b"\0" * 9
    machine = {(32, "<"): 3, (32, ">"): 20, (64, "<"): 62, (64, ">"): 21}[bits, e]
    if bits == 64:
        head = struct.pack(e + "HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, ehsize, 0, 0,
                           shentsize, 5, 4)  # fmt: skip
    else:
        head = struct.pack(e + "HHIIIIIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, ehsize, 0, 0,
                           shentsize, 5, 4)  # fmt: skip
    data = ident + head + b"".join(body)
    return data + b"\0" * (shoff - len(data)) + headers


@pytest.mark.parametrize(("bits", "endian"), [(32, "<"), (32, ">"), (64, ">"), (64, "<")])
def test_every_elf_layout_reads(tmp_path: Path, bits: int, endian: str) -> None:
    path = tmp_path / f"libpython-fake-{bits}{'le' if endian == '<' else 'be'}.so"
    path.write_bytes(_elf(bits, endian, 0x030C04F0))
    if READELF is not None:  # the file is a real ELF file, as binutils reads it
        theirs = _readelf_defined(str(path))
        assert set(theirs) == {"Py_Version", "PyGILState_Ensure", "PyGILState_Release",
                               "PyRun_SimpleString"}  # fmt: skip
        assert _ours_defined(str(path)) == theirs
    with open_regular(str(path)) as f:
        elf = ElfFile(f)
        assert (elf.bits, elf.endian) == (bits, endian)
        assert elf.uint32_at(0x1000) == 0x030C04F0
        assert elf.data_at(0x1000 + 14, 4) is None  # past the end of .rodata
    found = _identify_file(str(path))
    assert isinstance(found, TargetPython) and found.version == (3, 12), found


def test_a_truncated_file_is_an_error_not_a_crash(tmp_path: Path) -> None:
    whole = _elf(64, "<", 0x030B00F0)
    for cut in (3, 20, 63, 64, len(whole) // 2, len(whole) - 1):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(whole[:cut])
        assert _identify_file(str(path)) is None
