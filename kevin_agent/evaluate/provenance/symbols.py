"""The kernels actually built into an extension ``.so``, read from the binary (no cuobjdump).

Two sources, unioned:

* **Host stubs.** For every ``__global__`` function nvcc emits a host stub named
  ``__device_stub__<mangled kernel without its leading underscore>``. It shows in the symbol
  table as a local function (``_Z37__device_stub__Z10add_kernelPKfS0_PfiPKfS0_Pfi``) or, when the
  compiler inlined a template stub, only through its function-local statics
  (``_ZZL43__device_stub__Z12scale_kernelIfEvPKT_PS0_iPKfPfiE8__handle``). The number before
  ``__device_stub__`` is the length of the stub's identifier, which gives the kernel's mangled
  name exactly (``_Z10add_kernelPKfS0_Pfi``). ``.symtab`` and ``.dynsym`` are both read; a stripped
  ``.so`` keeps no local symbols, so this source then finds nothing.
* **Embedded cubins.** Each fatbin in the ``.nv_fatbin`` section holds entries; an uncompressed
  ELF entry is a cubin whose symbol table marks kernel entry points (``STT_FUNC`` with
  ``st_other & 0x10``, STO_CUDA_ENTRY) under their device names, which is how the profiler sees
  them (``c_kernel`` for an ``extern "C"`` kernel, where the stub still carries C++ mangling).
  An uncompressed PTX entry adds its ``.entry`` names. Compressed entries are skipped with a note.

Bounded for a hostile file: at most ``MAX_LISTED_BYTES`` read, never through a link, a fatbin
section read once however many headers name it, at most ``MAX_FATBINS`` fatbins and
``MAX_FATBIN_ENTRIES`` entries walked, ``elf.MAX_SYMBOLS`` symbols per image and in all cubins
together, ``MAX_KERNELS`` kernels; past a bound the listing is empty with a note. The build
step runs it in a confined child (``build.listing``), never in kevin's own process; the worker
(itself confined) lists an extension whose build stored no listing.

Standard library only.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kevin_agent.evaluate.processes import read_child_file
from kevin_agent.evaluate.provenance.elf import MAX_SYMBOLS, STT_FUNC, Elf, ElfError

STUB_MARK = "__device_stub__"
STO_CUDA_ENTRY = 0x10
FATBIN_MAGIC = 0xBA55ED50
FATBIN_ENTRY_PTX, FATBIN_ENTRY_ELF = 1, 2
_STUB = re.compile(r"(\d+)" + STUB_MARK)
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$.]*)\s*\(")
MAX_LISTED_BYTES = 256 * 1024 * 1024  # the build's own cap on a module (cache.MAX_MODULE_BYTES)
MAX_FATBIN_SECTIONS = 16
MAX_FATBINS = 4096  # fatbin headers walked in all (one per translation unit and arch)
MAX_FATBIN_ENTRIES = 4096
MAX_KERNELS = 10_000


class _Walk:
    """What one listing has walked so far; ElfError past a bound."""

    def __init__(self) -> None:
        self.fatbins = self.entries = self.symbols = 0

    def count(self, what: str, more: int, bound: int) -> None:
        value = getattr(self, what) + more
        if value > bound:
            raise ElfError(f"more than {bound:,} {what}")
        setattr(self, what, value)


@dataclass(frozen=True)
class ExtensionKernels:
    """The kernel symbols of one built extension (mangled, or plain for ``extern "C"``)."""

    path: str
    kernels: tuple[str, ...]
    from_stubs: int = 0  # how many the host stubs gave
    from_fatbin: int = 0  # how many the embedded cubins / PTX gave
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return bool(self.kernels)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ExtensionKernels:
        return cls(path=str(raw.get("path", "")), kernels=tuple(raw.get("kernels") or ()),
                   from_stubs=int(raw.get("from_stubs", 0)), from_fatbin=int(raw.get("from_fatbin", 0)),
                   notes=tuple(raw.get("notes") or ()))


def list_kernels(path: str) -> ExtensionKernels:
    """Kernels built into the ``.so`` at ``path`` (opened without following a link); never
    raises (problems become notes)."""
    try:
        data = read_child_file(Path(path), MAX_LISTED_BYTES + 1)
    except OSError as exc:
        return ExtensionKernels(str(path), (), notes=(f"cannot read {path}: {exc}",))
    return list_image(str(path), data)


def list_image(path: str, data: bytes) -> ExtensionKernels:
    """Kernels built into ``data``, the bytes of the ``.so`` at ``path``; never raises."""
    try:
        if len(data) > MAX_LISTED_BYTES:
            raise ElfError(f"larger than {MAX_LISTED_BYTES:,} bytes")
        elf = Elf(data)
    except ElfError as exc:
        return ExtensionKernels(str(path), (), notes=(f"cannot read {path}: {exc}",))
    notes: list[str] = []
    try:
        stubs = stub_kernels(s.name for s in elf.symbols())
    except ElfError as exc:
        stubs, notes = set(), [f"symbol tables unreadable: {exc}"]
    device, more = _device_kernels(elf)
    notes += more
    if not stubs:
        notes.append("no __device_stub__ symbols (stripped .so?)")
    kernels = stubs | device
    if len(kernels) > MAX_KERNELS:
        return ExtensionKernels(str(path), (), notes=(f"more than {MAX_KERNELS:,} kernels",))
    return ExtensionKernels(str(path), tuple(sorted(kernels)), len(stubs), len(device),
                            tuple(dict.fromkeys(notes)))


def _device_kernels(elf: Elf) -> tuple[set[str], list[str]]:
    """The kernels of every fatbin section of ``elf`` (each distinct section once), and notes."""
    sections = {(s.offset, s.size): s for s in elf.sections if "fatbin" in s.name.lower()}
    if not sections:
        return set(), ["no .nv_fatbin section"]
    if len(sections) > MAX_FATBIN_SECTIONS:
        return set(), [f"more than {MAX_FATBIN_SECTIONS} fatbin sections: not read"]
    device: set[str] = set()
    notes: list[str] = []
    walk = _Walk()
    for section in sections.values():
        try:
            found, more = fatbin_kernels(elf.section_bytes(section), walk)
        except ElfError as exc:
            found, more = set(), [f"{section.name} unreadable: {exc}"]
        device |= found
        notes += more
    return device, notes


# A __global__ definition or declaration in C++/CUDA text: the identifier before the parameter
# list, after the return type, qualifiers and an optional __launch_bounds__(...).
_GLOBAL_DEF = re.compile(r"\b__global__\b(?:[^;{}()]|__launch_bounds__\s*\([^()]*\))*?"
                         r"\b(?!__launch_bounds__\b)([A-Za-z_]\w*)\s*\(")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")


def defined_kernels(text: str) -> set[str]:
    """Base names (no namespace, no template arguments) of the ``__global__`` functions written
    in ``text``: the kernels the candidate's own sources define."""
    return {m.group(1) for m in _GLOBAL_DEF.finditer(text)}


def source_kernels(so_path: str) -> set[str] | None:
    """``defined_kernels`` of the sources the build compiled into ``so_path`` (the generated
    ``.cu``/``.cpp`` files in its build folder); None when no source file is there."""
    folder = Path(so_path).parent
    try:
        files = [p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file()]
    except OSError:
        return None
    if not files:
        return None
    names: set[str] = set()
    for path in files:
        try:
            names |= defined_kernels(path.read_text(errors="replace"))
        except OSError:
            continue
    return names


def stub_kernels(symbol_names: Iterable[str]) -> set[str]:
    """Mangled kernel names recovered from nvcc host-stub symbols (any symbol that embeds one)."""
    kernels: set[str] = set()
    for name in symbol_names:
        if STUB_MARK not in name:
            continue
        for match in _STUB.finditer(name):
            length = int(match.group(1))
            start = match.start() + len(match.group(1))
            identifier = name[start: start + length]
            if len(identifier) == length and length > len(STUB_MARK) + 1:
                inner = "_" + identifier[len(STUB_MARK):]
                if inner.startswith("_Z"):
                    kernels.add(inner)
    return kernels


def fatbin_kernels(data: bytes | memoryview, walk: _Walk | None = None) -> tuple[set[str], list[str]]:
    """Kernel entry names in a fatbin section's uncompressed cubins and PTX, plus notes; ElfError
    past a bound of ``walk`` (shared by the sections of one listing)."""
    walk = walk or _Walk()
    buf = memoryview(data)
    kernels: set[str] = set()
    notes: list[str] = []
    compressed = 0
    for kind, body in _fatbin_entries(buf, walk):
        if kind == FATBIN_ENTRY_ELF and bytes(body[:4]) == b"\x7fELF":
            try:
                symbols = Elf(body).symbols(limit=MAX_SYMBOLS - walk.symbols)
            except ElfError as exc:
                notes.append(f"embedded cubin unreadable: {exc}")
                continue
            walk.count("symbols", len(symbols), MAX_SYMBOLS)
            kernels.update(s.name for s in symbols if s.type == STT_FUNC and s.other & STO_CUDA_ENTRY)
        elif kind == FATBIN_ENTRY_PTX and _looks_like_ptx(body):
            kernels.update(m.group(1).decode("ascii", "replace") for m in _PTX_ENTRY.finditer(bytes(body)))
        elif kind in (FATBIN_ENTRY_ELF, FATBIN_ENTRY_PTX):
            compressed += 1
    if compressed:
        notes.append(f"{compressed} compressed fatbin entr{'y' if compressed == 1 else 'ies'} not read")
    return kernels, notes


def _looks_like_ptx(body: memoryview) -> bool:
    head = bytes(body[:4096])
    return b".version" in head or b".target" in head


def _fatbin_entries(buf: memoryview, walk: _Walk) -> Iterable[tuple[int, memoryview]]:
    """(kind, payload) of every entry of every fatbin in ``buf`` (fatbins are concatenated, aligned);
    ElfError past ``MAX_FATBINS`` fatbins or ``MAX_FATBIN_ENTRIES`` entries."""
    magic = struct.pack("<I", FATBIN_MAGIC)
    raw = bytes(buf)
    offset = raw.find(magic)
    while 0 <= offset and offset + 16 <= len(raw):
        walk.count("fatbins", 1, MAX_FATBINS)
        _magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", raw, offset)
        start, end = offset + header_size, min(len(raw), offset + header_size + fat_size)
        position = start
        while position + 16 <= end:
            kind, _entry_version, entry_header, payload = struct.unpack_from("<HHIQ", raw, position)
            if entry_header < 16 or payload <= 0:
                break
            walk.count("entries", 1, MAX_FATBIN_ENTRIES)
            body_start = position + entry_header
            yield kind, buf[body_start: min(end, body_start + payload)]
            position = body_start + payload
        offset = raw.find(magic, max(end, offset + 4))
