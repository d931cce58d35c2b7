"""How the judge and the worker share memory, fences and a clock: CUDA IPC, or files on the CPU.

``CudaTransport``: device allocations shared with ``cudaIpcGetMemHandle`` / ``cudaIpcOpenMemHandle``
(ctypes, into the same CUDA runtime torch loaded), fence words in the shared allocation written
and waited for by each side's stream (``cuStreamWriteValue64`` / ``cuStreamWaitValue64``: no
interprocess events, which need a shared ``/dev/shm``), and the judge's own timing events on its
own stream for time. The judge's shared buffers are raw
``cudaMalloc`` allocations of their own: a handle maps its whole allocation, so nothing else of
the judge's may live there. ``FileTransport``: the CPU stand-in the tests drive, with the same
protocol: shared buffers are files in a folder both processes may use, a fence is a no-op (the CPU
runs in order) and the clock is the judge's ``perf_counter``. torch (lazily) and the stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kevin_agent.evaluate.observe.wire import DTYPE_BYTES, HANDLE_HEX, ChannelError, TensorLeaf

CUDA_IPC_LAZY_ENABLE_PEER_ACCESS = 1
CU_STREAM_WAIT_VALUE_GEQ = 0x0
FLAG_BYTES = 256  # each fence word on its own stretch of the allocation; the inputs start after both
FENCES_BYTES = 2 * FLAG_BYTES
_FILE_HANDLE = re.compile(r"[a-z0-9-]{1,64}\.bin")


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def _loaded_library(fragment: str, fallback: str) -> ctypes.CDLL:
    """The library already loaded into this process whose path holds ``fragment`` (the CUDA
    runtime torch uses), else ``fallback`` by name."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if fragment in os.path.basename(path) and path.startswith("/"):
                    return ctypes.CDLL(path)
    except OSError:
        pass
    return ctypes.CDLL(fallback)


@dataclass
class Flag:
    """A fence word at ``address`` (this process's view of it) and how often it was used here."""

    address: int
    count: int = 0


def _driver_function(cuda: ctypes.CDLL, name: str) -> Any:
    """The driver's current version of ``name`` (``_v2`` where CUDA 12 renamed it)."""
    for candidate in (f"{name}_v2", name):
        function = getattr(cuda, candidate, None)
        if function is not None:
            return function
    raise ChannelError(f"the CUDA driver has no {name}")


def _checked(code: int, what: str) -> None:
    if code != 0:
        raise ChannelError(f"{what} failed (CUDA error {code})")


class _Raw:
    """A view of raw device memory that ``torch.as_tensor`` takes (``__cuda_array_interface__``)."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3}


def leaf_view(base: Any, leaf: TensorLeaf) -> Any:
    """``leaf`` as a tensor over the byte tensor ``base`` (its allocation); ChannelError when it
    does not fit inside it."""
    import torch

    if leaf.offset + leaf.nbytes > base.numel() or leaf.offset % DTYPE_BYTES[leaf.dtype]:
        raise ChannelError("a tensor that does not lie inside its shared allocation")
    part = base[leaf.offset:leaf.offset + leaf.nbytes]
    return part.view(getattr(torch, leaf.dtype)).view(leaf.shape)


class CudaTransport:
    """CUDA IPC on the current device (torch's runtime, through ctypes)."""

    name = "cuda"

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self._torch = torch
        self._cudart = _loaded_library("libcudart.so", "libcudart.so.13")
        self._cuda = _loaded_library("libcuda.so", "libcuda.so.1")
        self._opened: dict[str, Any] = {}
        self._allocations: list[int] = []

    def handle_ok(self, handle: str) -> bool:
        return len(handle) == HANDLE_HEX and all(c in "0123456789abcdef" for c in handle)

    def allocate(self, nbytes: int) -> tuple[Any, str]:
        """A fresh device allocation of its own (a byte tensor over it) and its IPC handle."""
        pointer = ctypes.c_void_p()
        _checked(self._cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(1, nbytes))), "cudaMalloc")
        self._allocations.append(int(pointer.value or 0))
        handle = _IpcHandle()
        _checked(self._cudart.cudaIpcGetMemHandle(ctypes.byref(handle), pointer), "cudaIpcGetMemHandle")
        view = self._torch.as_tensor(_Raw(int(pointer.value or 0), max(1, nbytes)), device=self.device)
        return view[:nbytes], bytes(handle.reserved).hex()

    def open(self, handle: str) -> Any:
        """The whole allocation ``handle`` names, as a byte tensor (mapped once per handle)."""
        if handle in self._opened:
            return self._opened[handle]
        if not self.handle_ok(handle):
            raise ChannelError("a malformed memory handle")
        raw = _IpcHandle.from_buffer_copy(bytes.fromhex(handle))
        pointer = ctypes.c_void_p()
        opener = self._cudart.cudaIpcOpenMemHandle
        opener.argtypes = [ctypes.POINTER(ctypes.c_void_p), _IpcHandle, ctypes.c_uint]
        _checked(opener(ctypes.byref(pointer), raw,
                                                   ctypes.c_uint(CUDA_IPC_LAZY_ENABLE_PEER_ACCESS)),
                 "cudaIpcOpenMemHandle")
        base, size = self._range(int(pointer.value or 0))
        view = self._torch.as_tensor(_Raw(base, size), device=self.device)
        self._opened[handle] = view
        return view

    def _range(self, pointer: int) -> tuple[int, int]:
        """(base, size) of the allocation holding ``pointer`` (the driver's own record)."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        _checked(self._cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                    ctypes.c_uint64(pointer)), "cuMemGetAddressRange")
        return int(base.value), int(size.value)

    def export(self, tensor: Any) -> TensorLeaf:
        """``tensor`` (contiguous, on this device) as a leaf another process can map."""
        base, _ = self._range(tensor.data_ptr())
        handle = _IpcHandle()
        _checked(self._cudart.cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(base)),
                 "cudaIpcGetMemHandle")
        dtype = str(tensor.dtype).removeprefix("torch.")
        return TensorLeaf(bytes(handle.reserved).hex(), tensor.data_ptr() - base, dtype, tuple(tensor.shape))

    def flags(self, allocation: Any, handle: str) -> tuple[Flag, Flag]:
        """("go", "done"): two 64-bit words at the start of ``allocation`` (shared as ``handle``).

        Interprocess CUDA events need both processes to share a ``/dev/shm`` (the candidate's
        layer grants none), while memory handles meet inside the driver; so a fence is a word
        that one side's stream writes (``cuStreamWriteValue64``) and the other's waits for
        (``cuStreamWaitValue64``, greater or equal), each counting its batches."""
        base = int(allocation.data_ptr())
        return Flag(base), Flag(base + FLAG_BYTES)

    def record(self, flag: Flag) -> None:
        """The flag's next count, written when this process's stream reaches this point."""
        flag.count += 1
        write = _driver_function(self._cuda, "cuStreamWriteValue64")
        _checked(write(ctypes.c_void_p(self._stream()), ctypes.c_uint64(flag.address), ctypes.c_uint64(flag.count),
                       ctypes.c_uint(0)), "cuStreamWriteValue64")

    def wait(self, flag: Flag) -> None:
        """This process's stream waits until the flag reaches its next count."""
        flag.count += 1
        wait = _driver_function(self._cuda, "cuStreamWaitValue64")
        _checked(wait(ctypes.c_void_p(self._stream()), ctypes.c_uint64(flag.address), ctypes.c_uint64(flag.count),
                      ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ)), "cuStreamWaitValue64")

    def _stream(self) -> int:
        return int(self._torch.cuda.current_stream(self.device).cuda_stream)

    def mark(self) -> Any:
        """A point on this process's stream whose time ``between`` reads (a timing event)."""
        event = self._torch.cuda.Event(enable_timing=True)
        event.record(self._torch.cuda.current_stream(self.device))
        return event

    def between(self, start: Any, end: Any) -> float:
        """Milliseconds between two marks (after they completed)."""
        end.synchronize()
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)


class FileTransport:
    """The CPU stand-in: shared buffers are files in ``folder`` (both processes may write it)."""

    name = "files"

    def __init__(self, folder: Path) -> None:
        import torch

        self.folder = folder
        self.device = torch.device("cpu")
        self._torch = torch
        self._opened: dict[str, Any] = {}
        self._exported: dict[tuple[int, int], tuple[Any, str]] = {}

    def handle_ok(self, handle: str) -> bool:
        return bool(_FILE_HANDLE.fullmatch(handle))

    def _map(self, handle: str, nbytes: int) -> Any:
        return self._torch.from_file(str(self.folder / handle), shared=True, size=nbytes, dtype=self._torch.uint8)

    def allocate(self, nbytes: int) -> tuple[Any, str]:
        handle = f"{secrets.token_hex(8)}.bin"
        with open(self.folder / handle, "wb") as f:
            f.truncate(max(1, nbytes))
        return self._map(handle, max(1, nbytes))[:nbytes], handle

    def open(self, handle: str) -> Any:
        if handle in self._opened:
            return self._opened[handle]
        if not self.handle_ok(handle):
            raise ChannelError("a malformed file handle")
        fd = os.open(self.folder / handle, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        view = self._map(handle, size)
        self._opened[handle] = view
        return view

    def export(self, tensor: Any) -> TensorLeaf:
        """``tensor``'s bytes in a shared file, one file per address (CPU memory is not shared by
        address; as with CUDA IPC, the same memory exported twice is one place)."""
        flat = tensor.detach().contiguous().reshape(-1).view(self._torch.uint8)
        key = (tensor.data_ptr(), flat.numel())
        if key not in self._exported:
            self._exported[key] = self.allocate(flat.numel())
        view, handle = self._exported[key]
        view.copy_(flat)
        return TensorLeaf(handle, 0, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))

    def flags(self, allocation: Any, handle: str) -> tuple[Flag, Flag]:
        """No fences on the CPU: every step runs in order."""
        return Flag(0), Flag(0)

    def record(self, flag: Flag) -> None:
        flag.count += 1

    def wait(self, flag: Flag) -> None:
        flag.count += 1

    def mark(self) -> Any:
        return time.perf_counter()

    def between(self, start: Any, end: Any) -> float:
        return (end - start) * 1e3

    def synchronize(self) -> None:
        pass


Transport = Any  # CudaTransport or FileTransport (the same methods)


def transport_for(device: Any, folder: Optional[Path]) -> Transport:
    """CUDA IPC on a CUDA device, else files in ``folder``."""
    if getattr(device, "type", "cpu") == "cuda":
        return CudaTransport(device)
    if folder is None:
        raise ChannelError("the CPU stand-in needs a shared folder")
    return FileTransport(folder)
