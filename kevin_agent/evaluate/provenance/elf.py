"""A minimal ELF reader: section headers, section bytes and symbol tables. Standard library only.

Enough to list the symbols of a built extension ``.so`` (``.symtab`` and ``.dynsym``) and of the
cubins embedded in its ``.nv_fatbin`` section. 32- and 64-bit, little- and big-endian. Malformed
input raises ``ElfError`` (one line); nothing here executes or maps the file. Bounded: symbol
tables are read once each however many section headers name them, and at most ``limit``
symbols in all (``MAX_SYMBOLS``), so a crafted file cannot make it loop or fill memory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ELF_MAGIC = b"\x7fELF"
SHT_SYMTAB, SHT_DYNSYM, SHT_NOBITS = 2, 11, 8
STT_FUNC = 2
MAX_SYMBOLS = 500_000  # a load_inline extension has tens of thousands (pybind11's templates)
MAX_NAME = 16 * 1024  # bytes of one name read (CUTLASS kernels' mangled names run to a few KB)
MAX_NAME_BYTES = 64 * 1024 * 1024  # bytes of all the names of one symbols() call


class ElfError(ValueError):
    """Not an ELF file, or one this reader cannot follow."""


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int
    flags: int = 0  # SHF_* (SHF_WRITE 0x1, SHF_EXECINSTR 0x4)


@dataclass(frozen=True)
class Symbol:
    name: str
    type: int  # STT_* (low 4 bits of st_info)
    bind: int  # STB_* (high 4 bits of st_info)
    other: int  # st_other (CUDA cubins mark kernel entries with 0x10)
    shndx: int
    size: int


class Elf:
    """An ELF image held in memory (``data`` may be a slice of a larger buffer)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = memoryview(data)
        if bytes(self.data[:4]) != ELF_MAGIC or len(self.data) < 52:
            raise ElfError("not an ELF image")
        self.is64 = self.data[4] == 2
        if self.data[4] not in (1, 2) or self.data[5] not in (1, 2):
            raise ElfError("unknown ELF class or byte order")
        self.endian = "<" if self.data[5] == 1 else ">"
        self.sections = self._read_sections()

    def _unpack(self, fmt: str, offset: int) -> tuple:
        try:
            return struct.unpack_from(self.endian + fmt, self.data, offset)
        except struct.error as exc:
            raise ElfError(f"truncated ELF image at offset {offset}") from exc

    def _read_sections(self) -> list[Section]:
        if self.is64:
            shoff, = self._unpack("Q", 0x28)
            shentsize, shnum, shstrndx = self._unpack("HHH", 0x3A)
            fmt = "IIQQQQIIQQ"
        else:
            shoff, = self._unpack("I", 0x20)
            shentsize, shnum, shstrndx = self._unpack("HHH", 0x2E)
            fmt = "IIIIIIIIII"
        if shoff == 0 or shnum == 0:
            return []
        if shoff + shnum * shentsize > len(self.data):
            raise ElfError("section headers lie outside the image")
        raw = []
        for i in range(shnum):
            f = self._unpack(fmt, shoff + i * shentsize)
            # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
            raw.append((f[0], f[1], f[4], f[5], f[6], f[9], f[2]))
        names = raw[shstrndx] if shstrndx < len(raw) else None
        sections = []
        for name_off, typ, offset, size, link, entsize, flags in raw:
            name = self._cstr(names[2] + name_off, names[2] + names[3]) if names else ""
            sections.append(Section(name, typ, offset, size, link, entsize, flags))
        return sections

    def _cstr(self, start: int, limit: int) -> str:
        limit = min(limit, len(self.data), start + MAX_NAME)
        if start >= limit:
            return ""
        chunk = bytes(self.data[start:limit])
        end = chunk.find(b"\0")
        return chunk[: end if end >= 0 else len(chunk)].decode("utf-8", "replace")

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, section: Section) -> memoryview:
        if section.type == SHT_NOBITS:
            return memoryview(b"")
        if section.offset + section.size > len(self.data):
            raise ElfError(f"section {section.name} lies outside the image")
        return self.data[section.offset: section.offset + section.size]

    def symbols(self, which: tuple[int, ...] = (SHT_SYMTAB, SHT_DYNSYM), limit: int = MAX_SYMBOLS) -> list[Symbol]:
        """Every symbol of the symbol tables of the given types (both by default); ElfError past
        ``limit`` symbols. A table that several section headers name is read once."""
        found: list[Symbol] = []
        seen: set[tuple[int, int, int]] = set()
        names = 0
        for table in self.sections:
            if table.type not in which or table.link >= len(self.sections):
                continue
            if (table.offset, table.size, table.entsize) in seen:
                continue
            seen.add((table.offset, table.size, table.entsize))
            strings = self.sections[table.link]
            str_start, str_end = strings.offset, strings.offset + strings.size
            entsize = table.entsize or (24 if self.is64 else 16)
            fmt = "IBBHQQ" if self.is64 else "IIIBBH"
            if len(found) + table.size // entsize > limit:
                raise ElfError(f"more than {limit:,} symbols")
            for i in range(table.size // entsize):
                f = self._unpack(fmt, table.offset + i * entsize)
                if self.is64:
                    name_off, info, other, shndx, _value, size = f
                else:
                    name_off, _value, size, info, other, shndx = f
                if name_off == 0:
                    continue
                name = self._cstr(str_start + name_off, str_end)
                names += len(name)
                if names > MAX_NAME_BYTES:
                    raise ElfError(f"symbol names over {MAX_NAME_BYTES:,} bytes")
                found.append(Symbol(name, info & 0xF, info >> 4, other, shndx, size))
        return found


def read_elf(path: str) -> Elf:
    with open(path, "rb") as handle:
        return Elf(handle.read())
