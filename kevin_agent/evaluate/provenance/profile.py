"""Profile one forward call on the GPU (worker only; torch is imported inside the functions).

``profile_forward(fn, args, device)`` runs ``fn(*args)`` once under ``torch.profiler`` with CPU and
CUDA activity, inside a ``kevin::forward`` range, exports Kineto's Chrome trace and reads it back
into ``KernelActivity`` rows (``trace.activities_from_chrome_trace``): per kernel, memcpy and memset,
the calls, summed device time and launch context (the torch ops that launched it).

Capture the profiler's entry points with ``capture_handles()`` when the worker starts, before any
candidate code runs (a candidate could otherwise replace ``torch.profiler.profile``), and call
``warm_up`` then too: the first profile of a process initialises CUPTI, which costs far more than
later ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kevin_agent.evaluate.provenance.trace import (
    FORWARD_ANNOTATION,
    KernelActivity,
    activities_from_chrome_trace,
    unrecorded_launches,
)


@dataclass(frozen=True)
class ProfilerHandles:
    """The torch callables profiling needs, captured before candidate code can touch them."""

    profile: Any
    activity: Any  # torch.profiler.ProfilerActivity
    record_function: Any
    synchronize: Any  # torch.cuda.synchronize
    no_grad: Any


def capture_handles() -> ProfilerHandles:
    import torch
    import torch.profiler

    return ProfilerHandles(torch.profiler.profile, torch.profiler.ProfilerActivity, torch.profiler.record_function,
                           torch.cuda.synchronize, torch.no_grad)


def warm_up(device: Any = None, handles: ProfilerHandles | None = None) -> None:
    """Profile an empty range once so that CUPTI's one-time setup happens before any candidate."""
    import torch

    h = handles or capture_handles()
    x = torch.empty(16, device=device)
    profile_forward(lambda t: t.fill_(1.0), (x,), device, h)


HEAD_PADDING = 16  # throwaway kernels before the forward range, in every session


class IncompleteProfile(RuntimeError):
    """The profiler lost kernel records of the forward call: the trace cannot be judged."""


def profile_forward(fn: Callable[..., Any], args: Sequence[Any], device: Any = None,
                    handles: ProfilerHandles | None = None, raw_trace_path: Path | None = None,
                    padding: int = HEAD_PADDING) -> list[KernelActivity]:
    """The GPU work of one ``fn(*args)`` call; ``raw_trace_path`` also keeps Kineto's Chrome trace.

    ``padding`` tiny kernels run first, outside the forward range: CUPTI can corrupt the first
    kernel records of a session (one more per session in a process, pytorch#192021), and those
    must be throwaway ones. Raises ``IncompleteProfile`` when a kernel launched inside the forward
    call still has no record."""
    h = handles or capture_handles()
    h.synchronize(device)
    with h.no_grad():
        pad = _padding_buffer(device, padding)
        with h.profile(activities=[h.activity.CPU, h.activity.CUDA], record_shapes=False, profile_memory=False,
                       with_stack=False, with_flops=False, with_modules=False) as prof:
            if pad is not None:
                for _ in range(padding):
                    pad.fill_(0.0)
                h.synchronize(device)
            with h.record_function(FORWARD_ANNOTATION):
                fn(*args)
            h.synchronize(device)
    raw = _export(prof, raw_trace_path)
    missing = unrecorded_launches(raw, FORWARD_ANNOTATION)
    if missing:
        raise IncompleteProfile(f"{missing} kernel launch{'es' if missing != 1 else ''} of the forward call "
                                "have no kernel record in the profile")
    return activities_from_chrome_trace(raw, FORWARD_ANNOTATION)


def _padding_buffer(device: Any, padding: int) -> Any:
    if padding <= 0:
        return None
    import torch

    return torch.empty(1, device=device)


def _export(prof: Any, keep: Path | None) -> dict[str, Any]:
    if keep is not None:
        prof.export_chrome_trace(str(keep))
        return json.loads(Path(keep).read_text())
    handle, path = tempfile.mkstemp(prefix="kevin-trace-", suffix=".json")
    os.close(handle)
    try:
        prof.export_chrome_trace(path)
        return json.loads(Path(path).read_text())
    finally:
        os.unlink(path)
