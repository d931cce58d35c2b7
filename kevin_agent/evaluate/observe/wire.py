"""The channel between the judge (observer) and the worker it observes: JSON lines over two pipes.

The parent makes both pipes before either process starts and hands each process its ends
(``CHANNEL_ENV`` names the descriptors). The worker's end is in the candidate's process, so the
judge reads every message as hostile: one line at most ``MAX_LINE_BYTES``, read within a
deadline, a JSON object whose fields are checked by the readers below before anything is
allocated or mapped. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
import select
import time
from dataclasses import dataclass
from typing import Any, Optional

CHANNEL_ENV = "KEVIN_OBSERVE_FDS"  # "READ_FD,WRITE_FD" in the process that holds them
FOLDER_ENV = "KEVIN_OBSERVE_FOLDER"  # the CPU stand-in's shared folder (``transport.FileTransport``)
MAX_LINE_BYTES = 1024 * 1024
MAX_CALLS = 256  # calls in one batch
MAX_LEAVES = 64  # tensors (or values) in one call's inputs or outputs
MAX_DIMS = 12
MAX_NUMEL = 1 << 40
MAX_STAGING_BYTES = 64 << 30
HANDLE_HEX = 128  # a CUDA IPC handle: 64 bytes
# dtypes a leaf may have, by name; anything else is refused, never looked up
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2, "int32": 4,
               "int64": 8, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


class ChannelError(ValueError):
    """The peer broke the protocol, went silent past the deadline, or closed (one line: what)."""


@dataclass(frozen=True)
class TensorLeaf:
    """A contiguous tensor inside a shared allocation: ``handle`` (transport-specific text),
    ``offset`` bytes into it, ``dtype`` and ``shape``."""

    handle: str
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    def to_dict(self) -> dict[str, Any]:
        return {"handle": self.handle, "offset": self.offset, "dtype": self.dtype, "shape": list(self.shape)}


class Channel:
    """One end: reads lines from ``read_fd``, writes lines to ``write_fd``."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buffer = b""

    @classmethod
    def from_env(cls, environ: Optional[dict[str, str]] = None) -> Optional[Channel]:
        """The channel ``CHANNEL_ENV`` names, or None (no observer for this process)."""
        raw = (environ if environ is not None else os.environ).get(CHANNEL_ENV, "")
        parts = raw.split(",")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]))

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        if len(data) > MAX_LINE_BYTES:
            raise ChannelError(f"a message of {len(data)} bytes is over the channel's limit")
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.write_fd, view)
            except OSError as exc:
                raise ChannelError(f"the peer is gone ({exc.strerror})") from None
            view = view[written:]

    def receive(self, timeout_s: float) -> dict[str, Any]:
        """The next message (a JSON object); ChannelError past ``timeout_s``, on end of file, on a
        line over the limit or on anything but an object."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ChannelError("a message over the channel's limit")
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                raise ChannelError(f"no message within {timeout_s:g} s")
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                raise ChannelError("the peer closed the channel")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise ChannelError("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ChannelError("a message that is not a JSON object")
        return message

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def expect(message: dict[str, Any], op: str) -> dict[str, Any]:
    """``message`` when its ``op`` is ``op``; a message saying the peer failed becomes ChannelError."""
    got = message.get("op")
    if got == "failed":
        raise ChannelError(f"the worker failed: {str(message.get('why'))[:300]}")
    if got != op:
        raise ChannelError(f"expected {op!r}, got {str(got)[:40]!r}")
    return message


def whole(value: Any, low: int, high: int, what: str) -> int:
    """``value`` as an int in ``[low, high]`` (never a bool or a float); ChannelError otherwise."""
    if type(value) is not int or not low <= value <= high:
        raise ChannelError(f"{what} is not a whole number in [{low}, {high}]")
    return value


def read_leaf(raw: Any, handle_ok: Any) -> TensorLeaf:
    """A ``TensorLeaf`` from hostile JSON: a handle ``handle_ok`` accepts, a dtype from
    ``DTYPE_BYTES``, at most ``MAX_DIMS`` non-negative dims and ``MAX_NUMEL`` elements."""
    if not isinstance(raw, dict):
        raise ChannelError("a tensor description that is not an object")
    handle, dtype, shape = raw.get("handle"), raw.get("dtype"), raw.get("shape")
    if not isinstance(handle, str) or not handle_ok(handle):
        raise ChannelError("a tensor handle this transport does not take")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ChannelError(f"a tensor dtype outside the list ({str(dtype)[:20]!r})")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise ChannelError("a tensor shape that is not a list of at most 12 sizes")
    dims = tuple(whole(d, 0, MAX_NUMEL, "a tensor size") for d in shape)
    leaf = TensorLeaf(handle, whole(raw.get("offset"), 0, 1 << 48, "a tensor offset"), dtype, dims)
    if leaf.numel > MAX_NUMEL:
        raise ChannelError("a tensor of too many elements")
    return leaf
