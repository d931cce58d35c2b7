"""The witness file: the outputs of every checked candidate call, as plain bytes (issue 19).

Written by the worker (the candidate's process) and read by the judge process, so the reader
trusts nothing in it: never a pickle or any object of the candidate's, only a short JSON header
per call (seed, label, and per output leaf a dtype from a fixed list and a shape, or a plain
scalar) followed by the tensors' raw bytes, every size checked against the file before anything
is allocated. torch (imported lazily) and the standard library only.

Layout: ``MAGIC``, then per call a 4-byte big-endian header length, the header, the bytes.
"""

from __future__ import annotations

import ctypes
import io
import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

MAGIC = b"KEVIN-WITNESS-1\n"
MAX_HEADER_BYTES = 64 * 1024
MAX_CALLS = 64
MAX_LEAVES = 256
MAX_DIMS = 12
# the dtypes an output may have, by name (a name outside this list is refused, never looked up)
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
               "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2")


class BadWitness(ValueError):
    """The witness file is not what the worker writes (one line: what is wrong)."""


@dataclass
class WitnessCall:
    """One checked call: the seed its inputs were made from, where it was made, its output leaves."""

    seed: int
    label: str
    leaves: list[Any]  # CPU tensors and plain scalars, in ``flatten_outputs`` order


def _dtype(name: str) -> Any:
    import torch

    if name not in DTYPE_NAMES or not hasattr(torch, name):
        raise BadWitness(f"an output has dtype {name[:40]!r}, not one of the known dtypes")
    return getattr(torch, name)


def _leaf_header(leaf: Any) -> dict[str, Any]:
    import torch

    if isinstance(leaf, torch.Tensor):
        return {"dtype": str(leaf.dtype).replace("torch.", ""), "shape": [int(d) for d in leaf.shape]}
    if isinstance(leaf, complex):
        return {"complex": [leaf.real, leaf.imag]}
    return {"scalar": leaf}


def write_call(handle: IO[bytes], seed: int, label: str, leaves: list[Any]) -> None:
    """Append one call: its header, then each tensor leaf's bytes (copied to the host, contiguous)."""
    import torch

    header = json.dumps({"seed": seed, "label": label, "leaves": [_leaf_header(x) for x in leaves]}).encode()
    handle.write(len(header).to_bytes(4, "big") + header)
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.numel():
            host = leaf.detach().contiguous().cpu()
            handle.write((ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr()))


def open_witness(path: Path) -> io.BufferedIOBase:
    """The witness at ``path`` for reading, never through a link and never a FIFO or device (the
    folder is one candidate code could write)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadWitness("the witness is not a regular file")
    return io.BufferedReader(io.FileIO(fd, "rb"))


def read_calls(handle: io.BufferedIOBase) -> Iterator[WitnessCall]:
    """Every call in the file, checked as it is read (BadWitness at the first thing wrong)."""
    size = os.fstat(handle.fileno()).st_size
    if handle.read(len(MAGIC)) != MAGIC:
        raise BadWitness("the witness does not start with the worker's marker")
    for count in range(MAX_CALLS + 1):
        raw = handle.read(4)
        if not raw:
            return
        if count == MAX_CALLS:
            raise BadWitness(f"the witness holds more than {MAX_CALLS} calls")
        yield _read_call(handle, int.from_bytes(raw.rjust(4, b"\0"), "big"), size)


def _read_call(handle: io.BufferedIOBase, header_size: int, file_size: int) -> WitnessCall:
    if not 0 < header_size <= MAX_HEADER_BYTES:
        raise BadWitness(f"a call's header is {header_size} bytes (at most {MAX_HEADER_BYTES})")
    try:
        header = json.loads(handle.read(header_size))
        seed, label, leaves = header["seed"], header["label"], header["leaves"]
    except (ValueError, TypeError, KeyError) as exc:
        raise BadWitness(f"a call's header does not parse ({type(exc).__name__})") from exc
    if type(seed) is not int or not isinstance(label, str) or not isinstance(leaves, list):
        raise BadWitness("a call's header lacks an integer seed, a label or a list of outputs")
    if len(leaves) > MAX_LEAVES:
        raise BadWitness(f"a call has {len(leaves)} outputs (at most {MAX_LEAVES})")
    return WitnessCall(seed, label[:200], [_read_leaf(handle, leaf, file_size) for leaf in leaves])


def _read_leaf(handle: io.BufferedIOBase, leaf: Any, file_size: int) -> Any:
    import torch

    if not isinstance(leaf, dict):
        raise BadWitness("an output's description is not an object")
    if "scalar" in leaf:
        value = leaf["scalar"]
        if value is not None and type(value) not in (int, float, bool):
            raise BadWitness("an output scalar is not a plain number")
        return value
    if "complex" in leaf:
        parts = leaf["complex"]
        if not (isinstance(parts, list) and len(parts) == 2 and all(type(p) in (int, float) for p in parts)):
            raise BadWitness("an output complex number is not two plain numbers")
        return complex(parts[0], parts[1])
    dtype, shape = _dtype(str(leaf.get("dtype"))), leaf.get("shape")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(type(d) is int and d >= 0 for d in shape)):
        raise BadWitness("an output's shape is not a short list of sizes")
    count = math.prod(shape)
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    if nbytes > file_size - handle.tell():
        raise BadWitness(f"an output claims {nbytes} bytes, more than the witness holds")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    data = bytearray(nbytes)
    if handle.readinto(data) != nbytes:
        raise BadWitness("the witness ends inside an output")
    return torch.frombuffer(data, dtype=dtype).reshape(shape)


class WitnessWriter:
    """The worker's end: opened before any candidate code runs; a failed write (a full disk, a
    descriptor the candidate closed) ends the witness, and the judge then lacks those calls."""

    def __init__(self, path: Path) -> None:
        self.broken: str | None = None
        self.handle: IO[bytes] | None = None
        try:
            self.handle = open(path, "wb")
            self.handle.write(MAGIC)
        except OSError as exc:
            self.broken = f"the witness could not be opened: {exc}"

    def record(self, seed: int, label: str, leaves: list[Any]) -> None:
        if self.handle is None or self.broken:
            return
        try:
            write_call(self.handle, seed, label, leaves)
        except (OSError, ValueError) as exc:  # ValueError: a closed file
            self.broken = f"the witness could not be written: {exc}"

    def close(self) -> None:
        if self.handle is not None:
            try:
                self.handle.close()
            except OSError:
                pass
