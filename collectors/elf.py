"""A small reader of ELF files (32/64-bit, little/big endian): section headers, the dynamic or
full symbol table, and the bytes the file holds behind a symbol's address.

sofa-top reads a target's executable and its mapped libraries with it to tell which Python
runs there (``collectors.pyversion``) without executing any of it. Everything is bounded: a
file is opened only when it is a regular file (no FIFO, no device), and no table is read past
``MAX_TABLE`` bytes, so a crafted file costs at most that.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_TABLE = 64 << 20  # the largest section read (a libpython's .dynsym is ~100 KB)
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
SHT_SYMTAB = 2
SHT_NOBITS = 8
SHT_DYNSYM = 11


class ElfError(Exception):
    """The file is not an ELF file sofa-top can read (one line for people)."""


@dataclass(frozen=True, slots=True)
class Section:
    """One section header."""

    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True, slots=True)
class Symbol:
    """One symbol; ``shndx`` 0 (``SHN_UNDEF``) is one the file imports, not defines."""

    name: str
    value: int
    size: int
    shndx: int

    @property
    def defined(self) -> bool:
        return self.shndx != SHN_UNDEF


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading, only when it is a regular file: a FIFO or a device (a crafted
    link in a target's file system) would block or never end. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class ElfFile:
    """An open ELF file; its section headers are read at once, its tables on demand."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        f.seek(0, os.SEEK_END)
        self.file_size = f.tell()
        ident = self._read(0, 16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError(f"unknown ELF class {ident[4]} or byte order {ident[5]}")
        self.bits = 32 if ident[4] == 1 else 64
        self.endian = "<" if ident[5] == 1 else ">"
        self.sections = self._section_headers()

    def _read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or size > MAX_TABLE or offset + size > self.file_size:
            raise ElfError(f"a table at {offset:#x} (+{size}) lies outside the file")
        self._f.seek(offset)
        return self._f.read(size)

    def _unpack(self, fmt: str, offset: int) -> tuple[int, ...]:
        fmt = self.endian + fmt
        return struct.unpack(fmt, self._read(offset, struct.calcsize(fmt)))

    def _section_headers(self) -> list[Section]:
        # e_shoff, e_shentsize, e_shnum, e_shstrndx after e_ident, e_type .. e_version
        if self.bits == 64:
            shoff, shentsize, shnum, shstrndx = self._unpack("40xQ10xHHH", 0)
            sh_fmt = "IIQQQQIIQQ"
        else:
            shoff, shentsize, shnum, shstrndx = self._unpack("32xI10xHHH", 0)
            sh_fmt = "IIIIIIIIII"
        if shoff == 0:
            return []  # no section headers (sstrip'ed): nothing this reader can find
        if shentsize != struct.calcsize(sh_fmt):
            raise ElfError(f"section header size {shentsize}")
        raw = [self._unpack(sh_fmt, shoff)]
        if shnum == 0:
            shnum = raw[0][5]  # more than 0xff00 sections: the count is in section 0's size
        if shnum * shentsize > MAX_TABLE:
            raise ElfError(f"{shnum} sections")
        raw += [self._unpack(sh_fmt, shoff + i * shentsize) for i in range(1, shnum)]
        if shstrndx == SHN_XINDEX:
            shstrndx = raw[0][6]
        names = b""
        if 0 < shstrndx < len(raw):
            names = self._read(raw[shstrndx][4], raw[shstrndx][5])
        # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
        return [Section(_cstr(names, r[0]), r[1], r[3], r[4], r[5], r[6]) for r in raw]

    def section(self, name: str) -> Section | None:
        """The first section called ``name``."""
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, section: Section) -> bytes:
        """What the file holds of ``section`` (nothing for .bss-like sections)."""
        if section.type == SHT_NOBITS:
            return b""
        return self._read(section.offset, section.size)

    def symbols(self, dynamic: bool = True) -> Iterator[Symbol]:
        """The symbols of .dynsym (``dynamic``) or of .symtab; none when the file has none."""
        kind = SHT_DYNSYM if dynamic else SHT_SYMTAB
        table = next((s for s in self.sections if s.type == kind), None)
        if table is None or not 0 <= table.link < len(self.sections):
            return
        strings = self.section_bytes(self.sections[table.link])
        data = self.section_bytes(table)
        if self.bits == 64:
            fmt, order = self.endian + "IBBHQQ", (0, 4, 5, 3)  # name info other shndx value size
        else:
            fmt, order = self.endian + "IIIBBH", (0, 1, 2, 5)  # name value size info other shndx
        entry = struct.calcsize(fmt)
        for off in range(entry, len(data) - entry + 1, entry):  # entry 0 is the null symbol
            f = struct.unpack_from(fmt, data, off)
            name, value, size, shndx = (f[i] for i in order)
            yield Symbol(_cstr(strings, name), value, size, shndx)

    def data_at(self, address: int, size: int) -> bytes | None:
        """The ``size`` bytes the file holds at virtual ``address`` (a constant's value), or None
        when no section with file contents covers them."""
        for s in self.sections:
            if s.type != SHT_NOBITS and s.addr and s.addr <= address < s.addr + s.size:
                if address + size > s.addr + s.size:
                    return None
                return self._read(s.offset + address - s.addr, size)
        return None

    def uint32_at(self, address: int) -> int | None:
        """The unsigned 32-bit integer the file holds at ``address``, in the file's byte order."""
        data = self.data_at(address, 4)
        return None if data is None else int(struct.unpack(self.endian + "I", data)[0])


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    raw = table[offset:] if end < 0 else table[offset:end]
    return raw.decode("utf-8", "replace")
