"""The worker's guards on a real device, in this process (no candidate code runs here)."""

from __future__ import annotations

import pytest
import torch

from kevin_agent.evaluate.worker import guards
from kevin_agent.evaluate.worker.speed_of_light import measure_peaks
from kevin_agent.evaluate.worker.timing import Clock, Timer, make_flush, stats_from_samples

pytestmark = pytest.mark.gpu

ELEMENTS = 4 << 20  # 16 MiB of fp32: a large-pool block


def _clock() -> Clock:
    import torch._dynamo  # as the worker does before capturing

    return Clock.from_captured(guards.capture_references(), torch.cuda.current_stream())


def test_freed_result_is_reused_without_poison_and_nan_with_it():
    device = torch.device("cuda")
    torch.cuda.synchronize()
    result = torch.full((ELEMENTS,), 7.0, device=device)
    address = result.data_ptr()
    del result
    reused = torch.empty(ELEMENTS, device=device)
    # the premise of the hack: the same block, still holding the old result
    assert reused.data_ptr() == address and bool((reused == 7.0).all())
    del reused
    poisoned = guards.poison_free_memory(device)
    assert poisoned >= ELEMENTS * 4
    fresh = torch.empty(ELEMENTS, device=device)
    assert fresh.data_ptr() == address and bool(torch.isnan(fresh).all())
    del fresh
    half = torch.empty(2 * ELEMENTS, device=device, dtype=torch.float16)  # the same bytes as fp16
    assert half.data_ptr() == address and bool(torch.isnan(half).all())


def test_no_false_patch_after_real_gpu_work():
    clock = _clock()
    captured = guards.capture_references()
    model = torch.nn.Linear(256, 256).cuda()
    x = torch.randn(64, 256, device="cuda")
    timer = Timer(clock, make_flush(torch.device("cuda")))
    stats_from_samples(timer.time(model, [x], trials=5, warmup=2))
    compiled = torch.compile(model)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    guards.poison_free_memory()
    assert guards.find_patched(captured) == []


def test_measured_peaks_are_plausible():
    peaks = measure_peaks(_clock(), torch.device("cuda"), make_flush(torch.device("cuda")))
    assert 0.5e12 < peaks.bandwidth_bytes_per_s < 20e12, peaks
    assert peaks.matmul_flops_per_s["bfloat16"] > 50e12, peaks
    assert peaks.matmul_flops_per_s["bfloat16"] > peaks.matmul_flops_per_s["float64"], peaks
