"""The witness file: the outputs of every checked candidate call, as plain bytes (issue 19).

Written by the worker (the candidate's process) and read by the judge process, so the reader
trusts nothing in it: never a pickle or any object of the candidate's, only a short JSON header
per call (seed, label, and per output leaf a dtype from a fixed list and a shape, or a plain
scalar) followed by the tensors' raw bytes, every size checked against the file before anything
is allocated. torch (imported lazily) and the standard library only.

Layout: a folder of one file per call (``call-NNN.bin``, so no file outgrows the sandbox's
per-file limit), each ``MAGIC``, a 4-byte big-endian header length, the header, the bytes. A run
whose outputs equal the previous call's of its seed (a trial's second run, usually) is a header
that says ``repeat`` and no bytes: a claim no weaker than the bytes, both being written by
the candidate's process. A call whose outputs hold more than ``FULL_CALL_BYTES`` keeps each large
leaf as a sample (``SampledLeaf``): ``SAMPLE_ELEMENTS`` of its elements at positions drawn from a
seed of ``os.urandom`` taken after the call returned, which the header carries and the judge draws
again (``sample_positions``). So a task whose outputs are gigabytes fits the sandbox's disk and
per-file limits, and the candidate cannot know beforehand which of its values are compared.
"""

from __future__ import annotations

import ctypes
import io
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kevin_agent.evaluate.processes import NotARegularFile, open_child_file

MAGIC = b"KEVIN-WITNESS-1\n"
MAX_HEADER_BYTES = 64 * 1024
MAX_CALLS = 64
MAX_LEAVES = 256
MAX_DIMS = 12
FULL_CALL_BYTES = 16 * 1024 * 1024  # a call's outputs up to this size are written whole
SAMPLE_ELEMENTS = 1024 * 1024  # beyond it, each leaf of more elements keeps this many
SAMPLE_SEED_LIMIT = 1 << 63
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
    leaves: list[Any]  # CPU tensors, SampledLeaf and plain scalars, in ``flatten_outputs`` order
    repeat: bool = False  # the same outputs as the previous call (no leaves)


@dataclass(frozen=True)
class SampledLeaf:
    """A large output leaf of ``shape``, kept as ``values`` (1-D): its flattened elements at
    ``sample_positions(seed, numel, len(values))``."""

    shape: list[int]
    seed: int
    values: Any


def sample_positions(seed: int, numel: int, count: int, device: Any) -> Any:
    """``count`` positions in ``range(numel)`` drawn from ``seed`` on ``device``; the same in every
    process of one machine (the worker and the judge draw them on the same kind of device)."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.randint(0, numel, (count,), generator=generator, device=device)


def sampling_plan(leaves: list[Any], full_call_bytes: int, sample_elements: int) -> dict[int, int]:
    """Leaf index -> sample seed for the leaves a call keeps as samples: none when its tensors hold
    at most ``full_call_bytes``, else every tensor of more than ``sample_elements`` elements."""
    import torch

    tensors = [(i, x) for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    if sum(x.numel() * x.element_size() for _, x in tensors) <= full_call_bytes:
        return {}
    return {i: int.from_bytes(os.urandom(8), "big") % SAMPLE_SEED_LIMIT
            for i, x in tensors if x.numel() > sample_elements}


def _dtype(name: str) -> Any:
    import torch

    if name not in DTYPE_NAMES or not hasattr(torch, name):
        raise BadWitness(f"an output has dtype {name[:40]!r}, not one of the known dtypes")
    return getattr(torch, name)


def _leaf_header(leaf: Any, sample: tuple[int, int] | None = None) -> dict[str, Any]:
    import torch

    if isinstance(leaf, torch.Tensor):
        header: dict[str, Any] = {"dtype": str(leaf.dtype).replace("torch.", ""),
                                  "shape": [int(d) for d in leaf.shape]}
        if sample is not None:
            header["sample"] = {"seed": sample[0], "count": sample[1]}
        return header
    if isinstance(leaf, complex):
        return {"complex": [leaf.real, leaf.imag]}
    return {"scalar": leaf}


def write_call(handle: IO[bytes], seed: int, label: str, leaves: list[Any], repeat: bool = False,
               samples: dict[int, int] | None = None, sample_elements: int = SAMPLE_ELEMENTS) -> None:
    """Append one call: its header, then each tensor leaf's bytes (copied to the host, contiguous;
    a leaf in ``samples``, index -> seed, as ``sample_elements`` of its elements); a ``repeat`` is
    its header alone."""
    import torch

    if repeat:
        header = json.dumps({"seed": seed, "label": label, "leaves": [], "repeat": True}).encode()
        handle.write(len(header).to_bytes(4, "big") + header)
        return
    samples = samples or {}
    described = [_leaf_header(x, (samples[i], sample_elements) if i in samples else None)
                 for i, x in enumerate(leaves)]
    header = json.dumps({"seed": seed, "label": label, "leaves": described}).encode()
    handle.write(len(header).to_bytes(4, "big") + header)
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor) and leaf.numel():
            kept = leaf.detach()
            if index in samples:
                kept = kept.reshape(-1)[sample_positions(samples[index], kept.numel(), sample_elements, kept.device)]
            host = kept.contiguous().cpu()
            handle.write((ctypes.c_char * (host.numel() * host.element_size())).from_address(host.data_ptr()))


def open_witness(path: Path | str, dir_fd: int | None = None) -> io.BufferedIOBase:
    """The witness file at ``path`` for reading (``processes.open_child_file``: the folder is one
    candidate code could write); BadWitness for a FIFO, device or folder."""
    try:
        return open_child_file(path, dir_fd)
    except NotARegularFile as exc:
        raise BadWitness("the witness is not a regular file") from exc


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


CALL_FILE = re.compile(r"call-\d{3}\.bin")


def read_witness(folder: Path) -> Iterator[WitnessCall]:
    """Every call in a witness folder, in order (one per ``call-NNN.bin``; other names ignored),
    the folder never through a link (BadWitness or OSError at the first thing wrong)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries if CALL_FILE.fullmatch(e.name))
        if len(names) > MAX_CALLS:
            raise BadWitness(f"the witness holds more than {MAX_CALLS} calls")
        for name in names:
            with open_witness(name, dir_fd=fd) as handle:
                calls = list(read_calls(handle))
            if len(calls) != 1:
                raise BadWitness(f"{name} holds {len(calls)} calls, not one")
            yield calls[0]
    finally:
        os.close(fd)


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
    if header.get("repeat") is True and not leaves:
        return WitnessCall(seed, label[:200], [], repeat=True)
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
    sample = _sample_of(leaf.get("sample"), count)
    kept = sample[1] if sample else count
    nbytes = kept * torch.empty((), dtype=dtype).element_size()
    if nbytes > file_size - handle.tell():
        raise BadWitness(f"an output claims {nbytes} bytes, more than the witness holds")
    if kept == 0:
        return torch.empty(shape, dtype=dtype)
    data = bytearray(nbytes)
    if handle.readinto(data) != nbytes:
        raise BadWitness("the witness ends inside an output")
    values = torch.frombuffer(data, dtype=dtype)
    return SampledLeaf(list(shape), sample[0], values) if sample else values.reshape(shape)


def _sample_of(raw: Any, numel: int) -> tuple[int, int] | None:
    """(seed, count) of a sampled leaf's header, checked; None for a leaf written whole."""
    if raw is None:
        return None
    seed, count = (raw.get("seed"), raw.get("count")) if isinstance(raw, dict) else (None, None)
    if type(seed) is not int or type(count) is not int or not 0 <= seed < SAMPLE_SEED_LIMIT:
        raise BadWitness("an output's sample lacks an integer seed and count")
    if not 0 < count < numel:
        raise BadWitness(f"an output's sample keeps {count} of its {numel} elements")
    return seed, count


class WitnessWriter:
    """The worker's end, made before any candidate code runs: one file per call in ``folder``; a
    failed write (a full disk, a file too large for the sandbox) ends the witness, and the judge
    then lacks those calls (it says so; the verdict fails closed)."""

    def __init__(self, folder: Path, full_call_bytes: int = FULL_CALL_BYTES,
                 sample_elements: int = SAMPLE_ELEMENTS) -> None:
        self.folder = folder
        self.full_call_bytes, self.sample_elements = full_call_bytes, sample_elements
        self.broken: str | None = None
        self.count = 0
        self.previous: tuple[int, list[Any]] | None = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.broken = f"the witness could not be made: {exc}"

    def record(self, seed: int, label: str, leaves: list[Any]) -> None:
        if self.broken:
            return
        repeat = self.previous is not None and self.previous[0] == seed and same_leaves(self.previous[1], leaves)
        try:
            with open(self.folder / f"call-{self.count:03d}.bin", "xb") as handle:
                handle.write(MAGIC)
                plan = {} if repeat else sampling_plan(leaves, self.full_call_bytes, self.sample_elements)
                write_call(handle, seed, label, leaves, repeat=repeat, samples=plan,
                           sample_elements=self.sample_elements)
        except (OSError, ValueError) as exc:  # ValueError: a closed file
            self.broken = f"the witness could not be written: {exc}"
            return
        self.count += 1
        self.previous = (seed, leaves)


def same_leaves(first: list[Any], second: list[Any]) -> bool:
    """The same outputs: tensors of one dtype, shape and device with equal values (NaN never equals),
    scalars of one type and value."""
    import torch

    if len(first) != len(second):
        return False
    for a, b in zip(first, second, strict=True):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return False
        if isinstance(a, torch.Tensor):
            if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device or not bool(torch.equal(a, b)):
                return False
        elif type(a) is not type(b) or a != b:
            return False
    return True
