"""Issue 19 on CPU: launches from every thread and stream of the process are attributed, not only
the forward's own thread (a Kineto Chrome trace built by hand in the recorded format)."""

from __future__ import annotations

from typing import Any

from kevin_agent.evaluate.provenance.attribution import OwnKernels
from kevin_agent.evaluate.provenance.policy import judge
from kevin_agent.evaluate.provenance.trace import activities_from_chrome_trace, unrecorded_launches

MAIN, HELPER = 100, 200
OWN = "void add_kernel<float>(float const*, float const*, float*, int)"
TORCH_MM = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
PAD = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
       "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
SGEMM = ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4"
         "_execute_kernel__5x_cublas")


def span(name: str, tid: int, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def launch(tid: int, ts: float, correlation: int, api: str = "cudaLaunchKernel") -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": tid, "ts": ts, "dur": 2.0,
            "args": {"correlation": correlation}}


def kernel(name: str, ts: float, correlation: int, stream: int = 7) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": 10.0,
            "args": {"correlation": correlation, "stream": stream, "device": 0}}


def trace(helper_kernels: bool = True) -> list[dict[str, Any]]:
    """Padding before the range (main thread); the forward range launches the candidate's own
    kernel; a helper thread it started launches a torch add (inside an aten op on that thread)
    during the range and a cuBLAS GEMM (no CPU op recorded there) after the range closed, before
    the profile's final synchronize; each on a side stream."""
    events = [span("aten::fill_", MAIN, 10.0, 5.0), launch(MAIN, 11.0, 1), kernel(PAD, 20.0, 1),
              span("kevin::forward", MAIN, 100.0, 100.0, "user_annotation"),
              launch(MAIN, 110.0, 2), kernel(OWN, 120.0, 2)]
    if helper_kernels:
        events += [span("aten::add", HELPER, 130.0, 20.0), launch(HELPER, 135.0, 3), kernel(TORCH_MM, 140.0, 3, 9),
                   launch(HELPER, 250.0, 4), kernel(SGEMM, 260.0, 4, 11)]
    return events


def test_work_launched_by_another_thread_during_and_after_the_call_is_kept():
    names = {a.name: a for a in activities_from_chrome_trace(trace())}
    assert set(names) == {OWN, TORCH_MM, SGEMM}  # the padding before the range is dropped
    assert names[TORCH_MM].context == ("aten::add",)


def test_strict_rejects_a_token_kernel_whose_helper_thread_does_the_work():
    """The attack: the forward launches a token own kernel and hands the real work to a thread
    (or a stream callback), which only the forward's own thread used to hide."""
    own = OwnKernels(["_Z10add_kernelIfEvPKT_S2_PS0_i"], {"_Z10add_kernelIfEvPKT_S2_PS0_i": OWN})
    result = judge(activities_from_chrome_trace(trace()), own, 1, "strict")
    assert not result.ok and result.reasons and "foreign compute" in result.reasons[0]
    assert {r.origin for r in result.kernels} == {"own", "torch", "library"}
    honest = judge(activities_from_chrome_trace(trace(helper_kernels=False)), own, 1, "strict")
    assert honest.ok, honest.reasons


def test_a_helper_threads_launch_without_a_kernel_record_makes_the_trace_incomplete():
    events = [e for e in trace() if not (e.get("cat") == "kernel" and e["args"]["correlation"] == 4)]
    assert unrecorded_launches(events) == 1
    assert unrecorded_launches(trace()) == 0
