"""Attacks on the kernel listing (issue 18): the build parses the ``.so`` a candidate's sources
produced (``provenance.symbols``) to find its own kernels. A crafted binary must not hang, fill
memory or reach a secret in kevin's process: the listing runs in a confined child
(``build.listing``), and the parser itself is bounded. Each crafted file is listed confined and,
as the control, in an unconfined child; both must end in a clean "no kernels" listing, and the
parent never parses (its ELF reader is made to fail here). No nvcc: the files are made by hand."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from kevin_agent.eval_modes import SandboxMode
from kevin_agent.evaluate.build.listing import kernel_listing
from kevin_agent.evaluate.provenance import elf as elf_module
from kevin_agent.evaluate.provenance.symbols import list_kernels

STUB = "_Z37__device_stub__Z10add_kernelPKfS0_PfiPKfS0_Pfi"  # nvcc's host stub of add_kernel
KERNEL = "_Z10add_kernelPKfS0_Pfi"
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB = 1, 2, 3


def _landlock() -> bool:
    from kevin_agent.evaluate.sandbox import probe

    return probe().available


needs_sandbox = pytest.mark.skipif(not _landlock(), reason="this host cannot confine (no Landlock/seccomp)")
BOTH = pytest.mark.parametrize("sandbox", [pytest.param("required", marks=needs_sandbox), "off"])


def make_elf(blobs: list[bytes], sections: list[tuple[str, int, int, int, int, int, int]]) -> bytes:
    """A 64-bit little-endian ELF image: ``blobs`` laid out after the header, then one section
    header per ``(name, type, blob, skip, size or -1, link, entsize)`` (offsets into a blob;
    ``link`` counts the null section and ``.shstrtab`` first, so user sections start at 2)."""
    names = b"\0.shstrtab\0" + b"".join(name.encode() + b"\0" for name, *_ in sections)
    chunks, offsets, position = [names], [], 64 + len(names)
    for blob in blobs:
        offsets.append(position)
        chunks.append(blob)
        position += len(blob)
    shoff = position + (-position % 8)
    headers = [bytes(64), struct.pack("<IIQQQQIIQQ", 1, SHT_STRTAB, 0, 0, 64, len(names), 0, 0, 1, 0)]
    name_at = 11
    for name, kind, index, skip, size, link, entsize in sections:
        length = len(blobs[index]) - skip if size < 0 else size
        start = offsets[index] + skip
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, start, length, link, 0, 1, entsize))
        name_at += len(name) + 1
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers), 1)
    body = header + b"".join(chunks)
    return body + bytes(shoff - len(body)) + b"".join(headers)


def symbol_table(names: list[str]) -> tuple[bytes, bytes]:
    """(.symtab, .strtab) blobs holding one local function symbol per name."""
    strings, entries = b"\0", [bytes(24)]
    for name in names:
        entries.append(struct.pack("<IBBHQQ", len(strings), 2, 0, 1, 0, 0))
        strings += name.encode() + b"\0"
    return b"".join(entries), strings


def with_stub() -> bytes:
    symtab, strtab = symbol_table([STUB])
    sections = [(".symtab", SHT_SYMTAB, 0, 0, -1, 3, 24), (".strtab", SHT_STRTAB, 1, 0, -1, 0, 0)]
    return make_elf([symtab, strtab], sections)


def truncated() -> bytes:
    return with_stub()[:100]


def huge_fatbin() -> bytes:
    """A fatbin header claiming 2**62 bytes, then 20 000 one-byte entries (each a cubin kind)."""
    entries = b"".join(struct.pack("<HHIQ", 2, 1, 16, 1) + b"\x7f" for _ in range(20_000))
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 1 << 62) + entries
    return make_elf([fatbin], [(".nv_fatbin", SHT_PROGBITS, 0, 0, -1, 0, 0)])


def symbol_table_loop() -> bytes:
    """3 000 section headers naming the same 3 000-symbol table, each starting one symbol later
    (no two alike): 4.5 million symbols to read for a 500 KB file."""
    symtab, strtab = symbol_table([f"_Z{i}f" for i in range(3000)] + [STUB])
    tables = [(".symtab", SHT_SYMTAB, 0, 24 * i, -1, 2 + 3000, 24) for i in range(3000)]
    return make_elf([symtab, strtab], [*tables, (".strtab", SHT_STRTAB, 1, 0, -1, 0, 0)])


def fatbin_section_loop() -> bytes:
    """60 000 fatbin section headers over one 2 000-entry fatbin (twice over, each header one
    byte further in): 120 million entries to walk for a 4 MB file."""
    entries = b"".join(struct.pack("<HHIQ", 2, 1, 16, 1) + b"\x7f" for _ in range(2000))
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries
    size = 2 * len(fatbin) - 64
    return make_elf([fatbin * 2], [(".nv_fatbin", SHT_PROGBITS, 0, i % 64, size, 0, 0) for i in range(60_000)])


CRAFTED = {
    "truncated": (truncated, "section headers lie outside the image"),
    "huge_fatbin": (huge_fatbin, "more than 4,096 entries"),
    "symbol_table_loop": (symbol_table_loop, "more than 500,000 symbols"),
    "fatbin_section_loop": (fatbin_section_loop, "more than 16 fatbin sections"),
}


@pytest.fixture
def parent_never_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """kevin's own process must not read the image: its ELF reader fails the test if used."""
    def refuse(self: object, data: object) -> None:
        raise AssertionError("the parent parsed a candidate's binary")

    monkeypatch.setattr(elf_module.Elf, "__init__", refuse)


def _module(tmp_path: Path, image: bytes) -> str:
    folder = tmp_path / "lib"
    folder.mkdir(exist_ok=True)
    (folder / "kevin_x.so").write_bytes(image)
    return str(folder / "kevin_x.so")


@BOTH
def test_a_module_is_listed_in_a_child_never_in_kevins_process(tmp_path: Path, sandbox: SandboxMode,
                                                               parent_never_parses: None) -> None:
    path = _module(tmp_path, with_stub())
    listing = kernel_listing(path, sandbox)
    assert listing["kernels"] == (KERNEL,) and listing["path"] == path


@BOTH
@pytest.mark.parametrize("name", list(CRAFTED))
def test_a_crafted_module_fails_the_listing_cleanly(tmp_path: Path, sandbox: SandboxMode, name: str,
                                                   parent_never_parses: None) -> None:
    make, note = CRAFTED[name]
    listing = kernel_listing(_module(tmp_path, make()), sandbox)
    assert listing["kernels"] == (), listing
    assert any(note in line for line in listing["notes"]), listing["notes"]


@pytest.mark.parametrize("name", list(CRAFTED))
def test_the_parser_alone_is_bounded(tmp_path: Path, name: str) -> None:
    """The worker lists in its own (confined) process a module whose build stored no listing:
    the parser's bounds hold without the child's."""
    make, note = CRAFTED[name]
    listing = list_kernels(_module(tmp_path, make()))
    assert not listing.ok and any(note in line for line in listing.notes), listing.notes


def test_one_table_named_by_many_headers_is_read_once(tmp_path: Path) -> None:
    symtab, strtab = symbol_table([f"_Z{i}f" for i in range(2000)] + [STUB])
    tables = [(".symtab", SHT_SYMTAB, 0, 0, -1, 2 + 30_000, 24) for _ in range(30_000)]  # 60 M symbols before
    image = make_elf([symtab, strtab], [*tables, (".strtab", SHT_STRTAB, 1, 0, -1, 0, 0)])
    assert list_kernels(_module(tmp_path, image)).kernels == (KERNEL,)


@BOTH
def test_a_link_to_a_home_file_in_place_of_the_module_is_not_followed(tmp_path: Path, sandbox: SandboxMode,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "private.so").write_bytes(with_stub())
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "lib").mkdir()
    link = tmp_path / "lib" / "kevin_x.so"
    link.symlink_to(home / "private.so")
    assert link.read_bytes() == with_stub()  # control: following the link reads the home file
    listing = kernel_listing(str(link), sandbox)
    assert listing["kernels"] == () and "symbolic links" in listing["notes"][0], listing
    os.mkfifo(tmp_path / "lib" / "fifo.so")  # a plain open would block on it
    assert "not a regular file" in kernel_listing(str(tmp_path / "lib" / "fifo.so"), sandbox)["notes"][0]


def test_a_module_over_256_megabytes_is_not_read(tmp_path: Path, parent_never_parses: None) -> None:
    path = _module(tmp_path, with_stub())
    os.truncate(path, 300 * 1024 * 1024)  # sparse: a size, no disk
    listing = kernel_listing(path, "off")
    assert listing["kernels"] == () and "not a regular file under 268,435,456 bytes" in listing["notes"][0]


def test_a_listing_that_does_not_finish_fails(tmp_path: Path) -> None:
    listing = kernel_listing(_module(tmp_path, with_stub()), "off", timeout_s=0.01)
    assert listing["kernels"] == () and "did not finish within 0.01 s" in listing["notes"][0]


def _in_listing_child(statement: str, sandbox: SandboxMode, scratch: Path) -> subprocess.CompletedProcess[str]:
    """``statement`` run as the listing child's code would be: under ``listing_policy``."""
    from kevin_agent.evaluate.processes import scrubbed_environment
    from kevin_agent.evaluate.sandbox import launch_command, listing_policy

    argv = launch_command(listing_policy(scratch), ["timeit", "-n", "1", "-r", "1", statement], sandbox, module=True)
    return subprocess.run(argv, cwd=scratch, env=scrubbed_environment(scratch=str(scratch)), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@needs_sandbox
def test_the_listing_child_cannot_read_the_home_or_take_two_gigabytes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("TOP-SECRET-LINE\n")
    monkeypatch.setenv("HOME", str(home))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    read = f"open({str(home / 'secret')!r}).read()"
    memory = "b = bytearray(2 << 30)"
    # the home file: refused by Landlock (PermissionError), or not there at all (the hidden home)
    for statement, refusals in ((read, ("PermissionError", "FileNotFoundError")), (memory, ("MemoryError",))):
        control = _in_listing_child(statement, "off", scratch)
        assert control.returncode == 0, control.stderr  # the attack works unconfined
        confined = _in_listing_child(statement, "required", scratch)
        assert confined.returncode != 0 and any(r in confined.stderr for r in refusals), confined.stderr
