"""Speed of light: the fastest the reference's work could possibly run on this GPU.

FLOPs come from torch's ``FlopCounterMode`` on the reference forward; bytes are the fewest the
forward must move (inputs, parameters and buffers read once, outputs written once). Peak rates are
measured once per GPU model, torch and CUDA version and cached as JSON: dense matmul FLOP/s per
dtype (fp32 with TF32 allowed, since a candidate may use tensor cores) and device memory bandwidth
(the best of a device-to-device copy, a read-only sum and a fill, L2 flushed before each run).
``sol_ms = max(flops / peak_flops, bytes / peak_bandwidth)``; ``sol_fraction = sol_ms / kernel_ms``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kevin_agent.data import BEYOND_SPEED_OF_LIGHT, ESCAPED_STREAM, IMPLAUSIBLE_SPEEDUP, TIMED_BELOW_PROFILE

SOL_LIMIT = 1.0  # a kernel above this fraction of speed of light is not believed
EAGER_SPEEDUP_LIMIT = 10.0  # KEVIN.md: flag speedups over 10x eager
MATMUL_DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass
class PeakRates:
    """Measured peaks of one GPU model under one torch/CUDA build."""

    gpu_name: str
    torch_version: str
    cuda_version: str
    bandwidth_bytes_per_s: float
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)

    def flops_for(self, dtype_name: str) -> float:
        """Peak FLOP/s for a reference dtype (fp32's TF32 rate for dtypes not measured)."""
        return self.matmul_flops_per_s.get(dtype_name) or self.matmul_flops_per_s["float32"]


def sol_ms(flops: float, bytes_moved: float, peak_flops: float, peak_bandwidth: float) -> float:
    """The lower bound in milliseconds: compute-bound or memory-bound, whichever is slower."""
    compute_s = flops / peak_flops if peak_flops > 0 else 0.0
    memory_s = bytes_moved / peak_bandwidth if peak_bandwidth > 0 else 0.0
    return max(compute_s, memory_s) * 1000.0


def timing_flags(
    sol_fraction: float | None, speedup_vs_eager: float | None, escape: str | None = None,
    kernel_ms: float | None = None, sol_bound_ms: float | None = None, profile: str | None = None,
) -> list[tuple[str, str]]:
    """The trust checks a correct candidate's timing trips: (flag name, reason) pairs, empty when
    nothing is off. A flagged verdict is not trusted: it earns nothing and is never a best."""
    flags = []
    if sol_fraction is not None and sol_fraction > SOL_LIMIT:
        flags.append((BEYOND_SPEED_OF_LIGHT,
                      f"faster than the GPU's speed of light ({sol_fraction:.2f}x of it: "
                      f"{kernel_ms or 0:.4f} ms measured, at least {sol_bound_ms or 0:.4f} ms possible)"))
    if speedup_vs_eager is not None and speedup_vs_eager > EAGER_SPEEDUP_LIMIT:
        flags.append((IMPLAUSIBLE_SPEEDUP,
                      f"{speedup_vs_eager:.1f}x faster than PyTorch eager (over {EAGER_SPEEDUP_LIMIT:g}x is rare "
                      "for real kernels)"))
    if escape:
        flags.append((ESCAPED_STREAM, escape))
    if profile:
        flags.append((TIMED_BELOW_PROFILE, profile))
    return flags


def suspicion_reasons(
    sol_fraction: float | None, speedup_vs_eager: float | None, escape: str | None = None,
    kernel_ms: float | None = None, sol_bound_ms: float | None = None,
) -> list[str]:
    """Why a correct candidate's timing is not believed (``timing_flags``' reasons)."""
    return [reason for _, reason in timing_flags(sol_fraction, speedup_vs_eager, escape, kernel_ms, sol_bound_ms)]


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def dominant_dtype(tensors: Iterable[Any]) -> str:
    """The floating dtype holding the most bytes among tensors (``"float32"`` when none)."""
    totals: dict[str, int] = {}
    for tensor in tensors:
        if tensor.is_floating_point():
            name = dtype_name(tensor.dtype)
            totals[name] = totals.get(name, 0) + tensor.numel() * tensor.element_size()
    return max(totals, key=totals.__getitem__) if totals else "float32"


def tensors_in(value: Any) -> list[Any]:
    """Tensor leaves of nested lists/tuples/dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of distinct storages (a tensor passed twice counts once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in tensors:
        key = (tensor.data_ptr(), tensor.numel() * tensor.element_size())
        if key in seen:
            continue
        seen.add(key)
        total += key[1]
    return total


def min_bytes(inputs: Any, model: Any, outputs: Any) -> int:
    """Inputs, parameters and buffers read once, outputs written once."""
    state = list(model.parameters()) + list(model.buffers())
    return tensor_bytes(tensors_in(inputs) + state) + tensor_bytes(tensors_in(outputs))


def count_flops(fn: Any, args: Any) -> tuple[float, Any]:
    """(FLOPs of one forward, its outputs) using torch's flop counter."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        outputs = fn(*args)
    return float(counter.get_total_flops()), outputs


# ---------------------------------------------------------------- peak measurement


def peaks_cache_path(cache_dir: Path, gpu_name: str, torch_version: str, cuda_version: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{gpu_name}-torch{torch_version}-cuda{cuda_version}")
    return Path(cache_dir) / "speed-of-light" / f"{slug.strip('-')}.json"


def load_peaks(path: Path) -> PeakRates | None:
    try:
        raw = json.loads(Path(path).read_text())
        peaks = PeakRates(**raw)
        return peaks if peaks.bandwidth_bytes_per_s > 0 and peaks.matmul_flops_per_s.get("float32") else None
    except (OSError, ValueError, TypeError):
        return None


def save_peaks(path: Path, peaks: PeakRates) -> None:
    """Atomic write (temp file then rename) so concurrent workers never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".{os.getpid()}-{os.urandom(4).hex()}.tmp")  # every confined worker is pid 1
    temp.write_text(json.dumps(asdict(peaks), indent=2))
    os.replace(temp, path)


def load_or_measure_peaks(cache_dir: Path, clock: Any, device: Any, flush: Any = None) -> PeakRates:
    """Cached peaks for this GPU model and build; measured (about a second) on a miss."""
    import torch

    gpu = torch.cuda.get_device_name(device)
    path = peaks_cache_path(cache_dir, gpu, torch.__version__, str(torch.version.cuda))
    cached = load_peaks(path)
    if cached is not None:
        return cached
    peaks = measure_peaks(clock, device, flush)
    try:
        save_peaks(path, peaks)
    except OSError:
        pass  # an unwritable cache only costs a re-measure next time
    return peaks


def _best_ms(clock: Any, fn: Any, flush: Any = None, trials: int = 10, warmup: int = 3) -> float:
    """Fastest of ``trials`` event-timed runs, each after ``flush`` (as the timing stage does)."""
    for _ in range(warmup):
        fn()
    clock.synchronize()
    best = float("inf")
    for _ in range(trials):
        if flush is not None:
            flush()
        start, end = clock.event(), clock.event()
        clock.record(start, clock.stream)
        fn()
        clock.record(end, clock.stream)
        clock.synchronize()
        best = min(best, clock.elapsed_time(start, end))
    return best


def measure_peaks(clock: Any, device: Any, flush: Any = None) -> PeakRates:
    """Dense matmul FLOP/s per dtype and memory bandwidth, best of several runs each.

    Bandwidth is the best of copy, read-only sum and fill at 64 MiB, 256 MiB and 1 GiB, with the
    L2 flushed before every run exactly as the timing stage does, so a kernel timed under the same
    conditions cannot beat it by cache effects alone.
    """
    import torch

    flops: dict[str, float] = {}
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        for name in MATMUL_DTYPES:
            n = 4096 if name == "float64" else 8192
            dtype = getattr(torch, name)
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            ms = _best_ms(clock, lambda a=a, b=b: torch.mm(a, b))
            flops[name] = 2.0 * n**3 / (ms / 1000.0)
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32
    rates = []
    for size in (64 << 20, 256 << 20, 1 << 30):
        src = torch.empty(size // 4, dtype=torch.float32, device=device).uniform_()
        dst = torch.empty_like(src)
        rates += [
            2 * size / (_best_ms(clock, lambda dst=dst, src=src: dst.copy_(src), flush) / 1000.0),
            size / (_best_ms(clock, lambda src=src: src.sum(), flush) / 1000.0),
            size / (_best_ms(clock, lambda dst=dst: dst.fill_(1.0), flush) / 1000.0),
        ]
        del src, dst
    torch.cuda.empty_cache()  # before any model runs: nothing of theirs is in the cache yet
    return PeakRates(
        gpu_name=torch.cuda.get_device_name(device),
        torch_version=torch.__version__,
        cuda_version=str(torch.version.cuda),
        bandwidth_bytes_per_s=max(rates),
        matmul_flops_per_s=flops,
    )
