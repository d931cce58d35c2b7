"""Record real provenance traces on a GPU host, for the CPU tests (tests/fixtures/provenance/).

One run builds one extension holding kernels of every style (plain, template, anonymous namespace,
nested namespace with __launch_bounds__, extern "C", cooperative groups, cub::BlockReduce, and a
cub::DeviceReduce call), then, per scenario, profiles one forward call of a candidate-like function
and of its reference with ``provenance.profile.profile_forward`` and writes
``<scenario>.json`` (format ``kevin-provenance-fixture/1``): the extension's own kernels (from
``symbols.list_kernels``), both traces, and what ``policy.judge`` decided under both policies (for
a human to review before the file becomes a fixture with an ``expect`` block). It also writes
``timings.json`` (symbol listing, profiler warm-up, each profile, each judge), ``symbols.json``
(our listing next to ``cuobjdump -sass`` function names when cuobjdump exists), a few raw Kineto
Chrome traces (``raw_<scenario>.json``), and a ``launch_overhead`` check (small-kernel launch
rate before and after profiling).

    PYTHONPATH=. python bench/record_traces.py --out /tmp/traces [--only own_add,conv_cudnn_own_epilogue]

Needs torch with CUDA, nvcc, and TORCH_CUDA_ARCH_LIST (defaults to the device's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from kevin_agent.evaluate.provenance import policy as P
from kevin_agent.evaluate.provenance.attribution import OwnKernels
from kevin_agent.evaluate.provenance.profile import capture_handles, profile_forward, warm_up
from kevin_agent.evaluate.provenance.symbols import list_kernels
from kevin_agent.evaluate.provenance.trace import ProfileTrace

FIXTURE_FORMAT = "kevin-provenance-fixture/1"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_reduce.cuh>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void add_kernel(const float* a, const float* b, float* c, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (int64_t)gridDim.x * blockDim.x) c[i] = a[i] + b[i];
}

template <typename T>
__global__ void scale_kernel(const T* x, T* y, T s, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

namespace {
__global__ void anon_relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
}

namespace kev { namespace ops {
__global__ void __launch_bounds__(256) bias_relu_kernel(const float* x, const float* bias, float* y,
                                                        int64_t n, int64_t hw, int64_t channels) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i] + bias[(i / hw) % channels]; y[i] = v > 0.f ? v : 0.f; }
}
} }

extern "C" __global__ void c_token_kernel(float* p) {
    if (threadIdx.x == 0 && blockIdx.x == 0) p[0] = p[0] * 1.0f;
}

__global__ void cg_sum_kernel(const float* x, float* out, int64_t n) {
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.f;
    float s = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) atomicAdd(out, s);
}

__global__ void block_sum_kernel(const float* x, float* out, int64_t n) {
    typedef cub::BlockReduce<float, 256> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s = Reduce(tmp).Sum(i < n ? x[i] : 0.f);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

static inline int blocks_for(int64_t n) { return (int)((n + 255) / 256); }

torch::Tensor add(torch::Tensor a, torch::Tensor b, bool zero_init) {
    auto c = zero_init ? torch::zeros_like(a) : torch::empty_like(a);
    auto stream = c10::cuda::getCurrentCUDAStream();
    add_kernel<<<std::min(blocks_for(a.numel()), 65535), 256, 0, stream>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.numel());
    return c;
}

torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (x.scalar_type() == torch::kDouble) {
        scale_kernel<double><<<blocks_for(x.numel()), 256, 0, stream>>>(
            x.data_ptr<double>(), y.data_ptr<double>(), s, x.numel());
    } else {
        scale_kernel<float><<<blocks_for(x.numel()), 256, 0, stream>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), (float)s, x.numel());
    }
    return y;
}

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    anon_relu_kernel<<<blocks_for(x.numel()), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto y = torch::empty_like(x);
    int64_t hw = x.size(2) * x.size(3);
    kev::ops::bias_relu_kernel<<<blocks_for(x.numel()), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), x.numel(), hw, x.size(1));
    return y;
}

torch::Tensor token(torch::Tensor x) {
    c_token_kernel<<<1, 32, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>());
    return x;
}

torch::Tensor cg_sum(torch::Tensor x) {
    auto out = torch::zeros({1}, x.options());
    cg_sum_kernel<<<blocks_for(x.numel()), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}

torch::Tensor block_sum(torch::Tensor x) {
    auto out = torch::zeros({1}, x.options());
    block_sum_kernel<<<blocks_for(x.numel()), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}

torch::Tensor cub_sum(torch::Tensor x) {
    auto out = torch::empty({1}, x.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    size_t bytes = 0;
    cub::DeviceReduce::Sum(nullptr, bytes, x.data_ptr<float>(), out.data_ptr<float>(), (int)x.numel(), stream);
    auto tmp = torch::empty({(int64_t)bytes}, x.options().dtype(torch::kUInt8));
    cub::DeviceReduce::Sum(tmp.data_ptr(), bytes, x.data_ptr<float>(), out.data_ptr<float>(), (int)x.numel(), stream);
    return out;
}
"""

CPP_SOURCE = """
torch::Tensor add(torch::Tensor a, torch::Tensor b, bool zero_init);
torch::Tensor scale(torch::Tensor x, double s);
torch::Tensor relu(torch::Tensor x);
torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias);
torch::Tensor token(torch::Tensor x);
torch::Tensor cg_sum(torch::Tensor x);
torch::Tensor block_sum(torch::Tensor x);
torch::Tensor cub_sum(torch::Tensor x);
"""
FUNCTIONS = ["add", "scale", "relu", "bias_relu", "token", "cg_sum", "block_sum", "cub_sum"]


def build_extension(build_dir: Path) -> tuple[Any, str, float]:
    from torch.utils.cpp_extension import load_inline

    start = time.monotonic()
    module = load_inline(name="kevin_provenance_record", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                         functions=FUNCTIONS, extra_cuda_cflags=["-O3"], build_directory=str(build_dir),
                         verbose=False)
    return module, str(module.__file__), time.monotonic() - start


def scenarios(ext: Any, dev: torch.device) -> dict[str, tuple[Callable, tuple, Callable | None, str]]:
    """name -> (candidate fn, inputs, reference fn or None, what it shows)."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dev, dtype)

    a, b = rand(4096, 4096), rand(4096, 4096)
    A, B = rand(2048, 2048), rand(2048, 2048)
    Ah, Bh = rand(2048, 2048, dtype=torch.float16), rand(2048, 2048, dtype=torch.float16)
    x4 = rand(16, 64, 64, 64)
    conv = nn.Conv2d(64, 64, 3, padding=1).to(dev)
    xd = rand(1 << 20, dtype=torch.float64)
    small = rand(1 << 20)

    def own_styles(a_, xd_, x4_):
        y = ext.add(a_, a_, False)
        ext.scale(y, 2.0)
        ext.scale(xd_, 3.0)
        ext.relu(y)
        ext.bias_relu(x4_, conv.bias)
        ext.token(y)
        ext.cg_sum(y)
        ext.block_sum(y)
        return y

    def compiled_body(t):
        return torch.relu(t * 2.0 + 1.0)

    compiled = torch.compile(compiled_body)

    graph_out: dict[str, Any] = {}

    def graphed_add(a_, b_):
        if "graph" not in graph_out:
            static_a, static_b = a_.clone(), b_.clone()
            ext.add(static_a, static_b, False)  # warm
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = ext.add(static_a, static_b, False)
            graph_out.update(graph=graph, a=static_a, b=static_b, out=out)
        graph_out["a"].copy_(a_)
        graph_out["b"].copy_(b_)
        graph_out["graph"].replay()
        return graph_out["out"]

    return {
        "own_styles": (own_styles, (a, xd, x4), None,
                       "every own kernel style: plain, template<float/double>, anonymous namespace, nested namespace "
                       "+ __launch_bounds__, extern C, cooperative groups, cub::BlockReduce; torch::zeros fills"),
        "own_add": (lambda p, q: ext.add(p, q, False), (a, b), lambda p, q: p + q,
                    "pure own kernel, torch::empty output"),
        "own_add_zeros": (lambda p, q: ext.add(p, q, True), (a, b), lambda p, q: p + q,
                          "own kernel with a torch::zeros_like output (fill)"),
        "matmul_cublas_own_relu": (lambda p, q: ext.relu(torch.matmul(p, q)), (A, B),
                                   lambda p, q: torch.relu(torch.matmul(p, q)), "cuBLAS matmul + own relu"),
        "matmul_fp16_fallback": (lambda p, q: ext.token(torch.relu(torch.matmul(p, q)).float()), (Ah, Bh),
                                 lambda p, q: torch.relu(torch.matmul(p, q)).float(),
                                 "fp16 cuBLAS (nvjet) + torch relu + cast, own token kernel"),
        "conv_cudnn_own_epilogue": (lambda t: ext.bias_relu(F.conv2d(t, conv.weight, None, padding=1), conv.bias),
                                    (x4,), lambda t: torch.relu(conv(t)),
                                    "cuDNN conv without bias + own bias+relu epilogue"),
        "token_torch_fallback": (lambda t: ext.token(torch.relu(conv(t))), (x4,), lambda t: torch.relu(conv(t)),
                                 "full torch fallback plus a token own kernel"),
        "torch_compile_fallback": (lambda t: ext.token(compiled(t)), (small,), compiled_body,
                                   "torch.compile'd fallback (Triton) plus a token own kernel"),
        "big_copy": (lambda t: ext.relu(t.t().contiguous()).t(), (a,), lambda t: torch.relu(t),
                     "own relu after a transposing .contiguous() copy"),
        "clone_memcpy": (lambda t: ext.relu(t.clone()), (a,), lambda t: torch.relu(t),
                         "own relu after a clone (memcpy DtoD)"),
        "cast_copies": (lambda t: ext.relu(t.float()).half(), (a.half(),), lambda t: torch.relu(t),
                        "own relu between two dtype casts"),
        "cub_device_reduce": (lambda t: ext.scale(ext.cub_sum(t), 2.0), (small,), lambda t: t.sum().reshape(1) * 2.0,
                              "cub::DeviceReduce compiled into the extension + own scale"),
        "cuda_graph_own": (graphed_add, (a, b), lambda p, q: p + q, "own kernel replayed from a CUDA graph"),
        "ref_softmax": (lambda t: torch.softmax(t, dim=1), (a,), None, "reference-only names: softmax"),
        "ref_layernorm": (lambda t: F.layer_norm(t, t.shape[-1:]), (a,), None, "reference-only names: layer_norm"),
        "ref_batchnorm": (lambda t: F.batch_norm(t, torch.zeros(64, device=dev), torch.ones(64, device=dev)), (x4,),
                          None, "reference-only names: batch_norm (inference)"),
        "ref_cat_arange": (lambda t: torch.cat([t, t], 0) + torch.arange(t.shape[1], device=dev), (a,), None,
                           "reference-only names: cat, arange, add"),
        "ref_fft": (lambda t: torch.fft.rfft(t, dim=1).abs(), (a,), None, "reference-only names: cuFFT"),
        "ref_sdpa": (lambda q: F.scaled_dot_product_attention(q, q, q), (rand(4, 8, 512, 64, dtype=torch.float16),),
                     None, "reference-only names: scaled_dot_product_attention"),
        "ref_linear_bias": (lambda t: F.linear(t, A, small[:2048]), (A,), None, "reference-only names: addmm"),
        "ref_reductions": (lambda t: (t.sum(1), t.amax(0), t.mean(), torch.argmax(t, 1)), (a,), None,
                           "reference-only names: reductions"),
        "ref_conv_bf16": (lambda t: F.conv2d(t, conv.weight.to(torch.bfloat16), None, padding=1),
                          (x4.to(torch.bfloat16),), None, "reference-only names: bf16 conv"),
    }


def _sync_time(fn: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def launch_rate(ext: Any, x: torch.Tensor, n: int = 2000) -> float:
    """Microseconds per tiny own-kernel launch (host-bound loop)."""
    for _ in range(50):
        ext.token(x)
    seconds = _sync_time(lambda: [ext.token(x) for _ in range(n)])
    return seconds / n * 1e6


def cuobjdump_functions(path: str) -> list[str] | str:
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(tool):
        return "cuobjdump not found"
    done = subprocess.run([tool, "-sass", path], capture_output=True, text=True, timeout=120)
    names = sorted({line.split("Function :", 1)[1].strip()
                    for line in done.stdout.splitlines() if "Function :" in line})
    return names or (done.stderr.strip()[:2000] or "no functions")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--raw", default="own_styles,conv_cudnn_own_epilogue,torch_compile_fallback,cuda_graph_own",
                        help="scenarios whose raw Kineto trace is kept")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda", torch.cuda.current_device())
    env = {"device": torch.cuda.get_device_name(dev), "torch_version": torch.__version__,
           "cuda_version": str(torch.version.cuda), "python": platform.python_version()}
    timings: dict[str, Any] = {"env": env}
    handles = capture_handles()
    timings["warm_up_first_s"] = _sync_time(lambda: warm_up(dev, handles))
    timings["warm_up_second_s"] = _sync_time(lambda: warm_up(dev, handles))

    build_dir = Path(tempfile.mkdtemp(prefix="kevin-prov-build-"))
    ext, so_path, build_s = build_extension(build_dir)
    timings["build_s"] = build_s
    start = time.perf_counter()
    kernels = list_kernels(so_path)
    timings["list_kernels_s"] = time.perf_counter() - start
    start = time.perf_counter()
    own = OwnKernels(kernels.kernels)
    timings["demangle_s"] = time.perf_counter() - start
    (args.out / "symbols.json").write_text(json.dumps(
        {"ours": kernels.to_dict(), "demangled": own.demangled,
         "cuobjdump_sass_functions": cuobjdump_functions(so_path), **env}, indent=1))

    tiny = torch.zeros(32, device=dev)
    timings["launch_us_before_profiling"] = launch_rate(ext, tiny)
    only = {s for s in args.only.split(",") if s}
    raw_keep = {s for s in args.raw.split(",") if s}
    per: dict[str, Any] = {}
    for name, (fn, inputs, reference, about) in scenarios(ext, dev).items():
        if only and name not in only:
            continue
        try:
            per[name] = record(name, fn, inputs, reference, about, kernels, dev, handles, args.out,
                               name in raw_keep, env)
            print(f"{name}: {per[name]['summary']}", flush=True)
        except Exception:
            per[name] = {"error": traceback.format_exc()[-3000:]}
            print(f"{name}: FAILED\n{per[name]['error']}", flush=True)
    timings["launch_us_after_profiling"] = launch_rate(ext, tiny)
    timings["scenarios"] = per
    (args.out / "timings.json").write_text(json.dumps(timings, indent=1))
    return 0


SESSIONS = [1]  # profiling sessions so far in this process (the warm-up is the first)


def record(name: str, fn: Callable, inputs: tuple, reference: Callable | None, about: str, kernels: Any,
           dev: torch.device, handles: Any, out: Path, keep_raw: bool, env: dict[str, str]) -> dict[str, Any]:
    with torch.no_grad():
        fn(*inputs)  # warm: lazy module loading, cuDNN/cuBLAS heuristics, torch.compile
        if reference is not None:
            reference(*inputs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    raw_path = out / f"raw_{name}.json" if keep_raw else None
    SESSIONS[0] += 2  # pad past CUPTI's corrupt head records: one more per session in a process
    candidate = profile_forward(fn, inputs, dev, handles, raw_trace_path=raw_path, padding=16 + SESSIONS[0])
    t1 = time.perf_counter()
    ref = profile_forward(reference, inputs, dev, handles, padding=16 + SESSIONS[0]) if reference is not None else []
    t2 = time.perf_counter()
    decisions = {}
    for policy in P.POLICIES:
        launches = sum(a.calls for a in ref) if reference is not None else None
        result = P.judge(candidate, kernels.kernels, launches, policy)
        decisions[policy] = {"ok": result.ok, "reasons": result.reasons, "summary": result.summary,
                             "partial_would_accept": result.partial_would_accept, "own_share": result.own_share}
    t3 = time.perf_counter()
    fixture = {
        "format": FIXTURE_FORMAT, "scenario": name, "about": about, "source": "recorded", **env,
        "own_kernels": list(kernels.kernels),
        "candidate": ProfileTrace(candidate, "candidate", "recorded", env["device"], env["torch_version"]).to_dict(),
        "reference": (ProfileTrace(ref, "reference", "recorded", env["device"], env["torch_version"]).to_dict()
                      if reference is not None else None),
        "recorded_decisions": decisions,
    }
    (out / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    table = P.judge(candidate, kernels.kernels, None, "partial").table
    return {"profile_candidate_s": t1 - t0, "profile_reference_s": t2 - t1, "judge_s": (t3 - t2) / 2,
            "summary": decisions["strict"]["summary"], "table": table}


if __name__ == "__main__":
    sys.exit(main())
