"""Candidate builder and case tables for tests/test_static_checks.py.

``make()`` writes a Kevin-format candidate (load_inline of one scale kernel, ModelNew calling it);
each case changes one part so the table reads as: what changed, which rule must fire (or none)."""

from __future__ import annotations

import textwrap

GOOD_CUDA = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.0f * x[i];
    }
}

torch::Tensor scale_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto x_c = x.contiguous();
    auto y = torch::empty_like(x_c);
    int64_t n = x_c.numel();
    const int threads = 256;
    scale_kernel<<<(n + threads - 1) / threads, threads>>>(x_c.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


def make(
    *,
    header: str = "",
    cuda: str = GOOD_CUDA,
    wrapper: str = "",
    functions: str = '["scale_cuda"]',
    load_extra: str = "",
    bases: str = "nn.Module",
    init: str = "",
    signature: str = "self, x",
    forward: str = "return scale.scale_cuda(x)",
    tail: str = "",
) -> str:
    """A complete candidate; ``wrapper`` is appended to the CUDA source (extra host code)."""
    init_body = textwrap.indent(textwrap.dedent(init).strip() or "pass", " " * 8)
    forward_body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    cuda_source = cuda + textwrap.dedent(wrapper)
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{textwrap.dedent(header).strip()}

cuda_source = r"""{cuda_source}"""

cpp_source = "torch::Tensor scale_cuda(torch::Tensor x);"

scale = load_inline(
    name="scale",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions={functions},
    verbose=False{load_extra},
)


class ModelNew({bases}):
    def __init__(self):
        super().__init__()
{init_body}

    def forward({signature}):
{forward_body}

{textwrap.dedent(tail).strip()}
'''


def cuda_with(kernel_body: str = "if (i < n) { y[i] = 2.0f * x[i]; }", host: str = "") -> str:
    """GOOD_CUDA with another kernel body and/or extra lines in the host wrapper before the launch."""
    return GOOD_CUDA.replace("if (i < n) {\n        y[i] = 2.0f * x[i];\n    }", kernel_body).replace(
        "    const int threads = 256;", host + "\n    const int threads = 256;")


TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(16)]

def get_init_inputs():
    return []
'''

# (case id, expected rule, candidate source) -- the rule must be among the violations.
REJECTED: list[tuple[str, str, str]] = [
    ("syntax", "syntax", make(forward="return scale.scale_cuda(x")),
    ("no-model-new", "no-model-new", make().replace("class ModelNew(", "class ModelFast(")),
    ("no-load-inline", "no-load-inline",
     make().replace("scale = load_inline(", "scale = dict(")
     .replace("from torch.utils.cpp_extension import load_inline", "")),
    ("no-global-kernel: host code only", "no-global-kernel",
     make(cuda="#include <torch/extension.h>\ntorch::Tensor scale_cuda(torch::Tensor x) { return x * 2; }\n")),
    ("no-global-kernel: kernel only in a comment", "no-global-kernel",
     make(cuda="#include <torch/extension.h>\n// __global__ void scale_kernel(float* x) {}\n"
               "torch::Tensor scale_cuda(torch::Tensor x) { return torch::empty_like(x); }\n")),
    ("no-kernel-launch", "no-kernel-launch",
     make(cuda=GOOD_CUDA.replace("scale_kernel<<<(n + threads - 1) / threads, threads>>>(x_c.data_ptr<float>(), "
                                 "y.data_ptr<float>(), n);", ""))),
    ("empty-kernel: {}", "empty-kernel", make(wrapper="__global__ void noop_kernel(float* x) {}\n")),
    ("empty-kernel: return and comments", "empty-kernel",
     make(wrapper="__global__ void noop_kernel(float* y) {\n    // TODO: compute\n    /* later */\n    return;\n}\n")),
    ("empty-forward: pass", "empty-forward", make(forward="pass")),
    ("empty-forward: ellipsis", "empty-forward", make(forward="...")),
    ("empty-forward: docstring + NotImplementedError", "empty-forward",
     make(forward='"""Fast path."""\nraise NotImplementedError')),
    ("empty-forward: missing", "empty-forward",
     make(forward="return scale.scale_cuda(x)").replace("def forward(self, x):", "def run(self, x):")),
    ("torch-compute: torch.matmul", "torch-compute", make(forward="return torch.matmul(x, x)")),
    ("torch-compute: F.relu", "torch-compute",
     make(header="import torch.nn.functional as F", forward="return F.relu(scale.scale_cuda(x))")),
    ("torch-compute: from-import alias", "torch-compute",
     make(header="from torch import matmul as mm", forward="return mm(x, x)")),
    ("torch-compute: re-bound name", "torch-compute",
     make(header="fast_gelu = torch.nn.functional.gelu", forward="return fast_gelu(scale.scale_cuda(x))")),
    ("torch-compute: getattr", "torch-compute", make(forward='return getattr(torch, "softmax")(x, dim=1)')),
    ("torch-compute: torch.compile", "torch-compute",
     make(forward="return torch.compile(lambda t: t * 2)(x)")),
    ("torch-compute: aten op", "torch-compute", make(forward="return torch.ops.aten.mm.default(x, x)")),
    ("torch-compute: torch.cat", "torch-compute", make(forward="return torch.cat([scale.scale_cuda(x), x])")),
    ("torch-compute: heavy op left in torch", "torch-compute",
     make(forward="y = torch.nn.functional.conv2d(x, self.weight)\nreturn scale.scale_cuda(y)",
          init="self.weight = nn.Parameter(torch.randn(8, 3, 3, 3))")),
    ("torch-compute: module-level helper", "torch-compute",
     make(forward="return helper(x)", tail="def helper(t):\n    return torch.sigmoid(t)")),
    ("nn-layer-call: self.conv(x)", "nn-layer-call",
     make(init="self.conv = nn.Conv2d(3, 8, 3)", forward="return scale.scale_cuda(self.conv(x))")),
    ("nn-layer-call: ModuleList loop", "nn-layer-call",
     make(init="self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])",
          forward="for layer in self.layers:\n    x = layer(x)\nreturn scale.scale_cuda(x)")),
    ("nn-layer-call: Sequential", "nn-layer-call",
     make(init="self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())", forward="return self.body(x)")),
    ("nn-layer-call: .forward", "nn-layer-call",
     make(init="self.fc = nn.Linear(4, 4)", forward="return self.fc.forward(x)")),
    ("nn-layer-call: built in forward", "nn-layer-call", make(forward="return nn.ReLU()(x)")),
    ("tensor-compute: + bias", "tensor-compute",
     make(init="self.bias = nn.Parameter(torch.zeros(16))", forward="return scale.scale_cuda(x) + self.bias")),
    ("tensor-compute: .sum()", "tensor-compute", make(forward="out = scale.scale_cuda(x)\nreturn out.sum(dim=1)")),
    ("tensor-compute: @", "tensor-compute", make(forward="return x @ x.t()")),
    ("tensor-compute: .matmul", "tensor-compute", make(forward="return x.matmul(x)")),
    ("tensor-compute: in-place *=", "tensor-compute", make(forward="out = scale.scale_cuda(x)\nout *= 2\nreturn out")),
    ("tensor-compute: masked write", "tensor-compute",
     make(forward="out = scale.scale_cuda(x)\nout[out < 0] = 0\nreturn out")),
    ("tensor-compute: negation", "tensor-compute", make(forward="out = scale.scale_cuda(x)\nreturn -out")),
    ("tensor-compute: x.add", "tensor-compute", make(forward="return scale.scale_cuda(x).add(x)")),
    ("tensor-compute: layer weight arithmetic", "tensor-compute",
     make(init="self.fc = nn.Linear(4, 4)", forward="return scale.scale_cuda(x) * self.fc.weight")),
    ("cpp-torch-compute: torch::matmul", "cpp-torch-compute",
     make(cuda=cuda_with(host="    return torch::matmul(x, x);"))),
    ("cpp-torch-compute: at::relu", "cpp-torch-compute", make(cuda=cuda_with(host="    y = at::relu(x_c);"))),
    ("cpp-torch-compute: tensor method", "cpp-torch-compute", make(cuda=cuda_with(host="    auto s = x_c.sum();"))),
    ("cpp-torch-compute: at::native", "cpp-torch-compute",
     make(cuda=cuda_with(host="    auto z = at::native::gelu(x_c);"))),
    ("library-call: cuBLAS", "library-call",
     make(cuda="#include <cublas_v2.h>\n" + cuda_with(host="    cublasHandle_t h; cublasCreate(&h);"))),
    ("library-call: cuDNN", "library-call", make(cuda=cuda_with(host="    cudnnConvolutionForward(0);"))),
    ("library-call: thrust", "library-call",
     make(cuda="#include <thrust/reduce.h>\n" + cuda_with(host="    float s = thrust::reduce(thrust::device, "
                                                             "x_c.data_ptr<float>(), x_c.data_ptr<float>() + 4);"))),
    ("try-except: fallback in forward", "try-except",
     make(forward="try:\n    return scale.scale_cuda(x)\nexcept Exception:\n    return x * 2")),
    ("try-except: around load_inline", "try-except",
     make().replace("scale = load_inline(", "try:\n    scale = load_inline(").replace(
         "verbose=False,\n)", "verbose=False,\n)\nexcept Exception:\n    scale = None", 1)),
    ("try-except: contextlib.suppress", "try-except",
     make(header="import contextlib",
          forward="with contextlib.suppress(RuntimeError):\n    return scale.scale_cuda(x)\nreturn x")),
    ("subclass-reference: class ModelNew(Model)", "subclass-reference", make(bases="Model")),
    ("subclass-reference: other torch.nn base", "subclass-reference", make(bases="nn.Linear")),
    ("reference-use: builds Model", "reference-use", make(init="self.ref = Model()", forward="return self.ref(x)")),
    ("reference-use: calls Model.forward", "reference-use", make(forward="return Model.forward(self, x)")),
    ("threads-processes: threading", "threads-processes", make(header="import threading")),
    ("threads-processes: concurrent.futures", "threads-processes",
     make(header="from concurrent.futures import ThreadPoolExecutor")),
    ("threads-processes: os.fork", "threads-processes",
     make(header="import os", forward="os.fork()\nreturn scale.scale_cuda(x)")),
    ("threads-processes: subprocess", "threads-processes", make(header="import subprocess")),
    ("threads-processes: std::thread", "threads-processes",
     make(cuda="#include <thread>\n" + cuda_with(host="    std::thread worker([]{});\n    worker.detach();"))),
    ("extra-stream: torch.cuda.Stream", "extra-stream",
     make(init="self.side = torch.cuda.Stream()",
          forward="with torch.cuda.stream(self.side):\n    return scale.scale_cuda(x)")),
    ("extra-stream: from torch.cuda import Stream", "extra-stream",
     make(header="from torch.cuda import Stream", init="self.side = Stream()")),
    ("extra-stream: raw handle of a new stream", "extra-stream",
     make(forward="handle = torch.cuda.Stream().cuda_stream\nreturn scale.scale_cuda(x)")),
    ("extra-stream: variable re-bound from the current stream to a new one", "extra-stream",
     make(forward="stream = torch.cuda.current_stream()\nif x.numel() > 4:\n    stream = self.side\n"
                  "return scale.scale_cuda(x, stream.cuda_stream)")),
    ("introspection: torch.profiler state", "introspection",
     make(forward="if torch.autograd.profiler._is_profiler_enabled:\n    return scale.scale_cuda(x)\nreturn x")),
    ("introspection: profiler import", "introspection", make(header="from torch.profiler import profile")),
    ("introspection: profiler state from C++", "introspection",
     make(cuda=cuda_with(host="    bool on = torch::autograd::profiler::profilerEnabled();\n    (void)on;"))),
    ("introspection: cudaProfilerStop", "introspection", make(cuda=cuda_with(host="    cudaProfilerStop();"))),
    ("empty-forward: no forward, inherits the reference's", "empty-forward", make(bases="Model").replace(
        "    def forward(self, x):\n        return scale.scale_cuda(x)\n", "    pass\n", 1)),
    ("extra-stream: cudaStreamCreate", "extra-stream",
     make(cuda=cuda_with(host="    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);"))),
    ("extra-stream: cudaStreamCreate without flags", "extra-stream",
     make(cuda=cuda_with(host="    cudaStream_t s; cudaStreamCreate(&s);"))),
    ("extra-stream: cudaStreamCreateWithPriority", "extra-stream",
     make(cuda=cuda_with(host="    cudaStream_t s; cudaStreamCreateWithPriority(&s, 0, -1);"))),
    ("extra-stream: cudaStreamPerThread", "extra-stream",
     make(cuda=cuda_with(host="    cudaStream_t s = cudaStreamPerThread; (void)s;"))),
    ("extra-stream: driver cuStreamCreate", "extra-stream",
     make(cuda=cuda_with(host="    CUstream s; cuStreamCreate(&s, 0);"))),
    ("extra-stream: per-thread default stream macro", "extra-stream",
     make(cuda="#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1\n" + GOOD_CUDA)),
    ("extra-stream: getStreamFromPool", "extra-stream",
     make(cuda=cuda_with(host="    auto s = at::cuda::getStreamFromPool();"))),
    ("extra-stream: per-thread default stream flag", "extra-stream",
     make(load_extra=',\n    extra_cuda_cflags=["-O3", "--default-stream=per-thread"]')),
    ("patching: torch.allclose", "patching", make(tail="torch.allclose = lambda *args, **kwargs: True")),
    ("patching: torch.cuda.Event", "patching", make(tail="class FakeEvent:\n    pass\n\ntorch.cuda.Event = FakeEvent")),
    ("patching: time.perf_counter", "patching", make(header="import time", tail="time.perf_counter = lambda: 0.0")),
    ("patching: setattr on torch", "patching", make(tail='setattr(torch, "matmul", lambda a, b: a)')),
    ("patching: import builtins", "patching", make(header="import builtins")),
    ("patching: sys.modules", "patching", make(header="import sys", tail='sys.modules["torch"].allclose = None')),
    ("patching: backend flags", "patching", make(tail="torch.backends.cuda.matmul.allow_tf32 = True")),
    ("patching: os.environ", "patching", make(header="import os", tail='os.environ["CUDA_LAUNCH_BLOCKING"] = "1"')),
    ("patching: torch global setting", "patching", make(tail='torch.set_float32_matmul_precision("medium")')),
    ("patching: __torch_function__", "patching",
     make(tail="class Spy(torch.Tensor):\n    @classmethod\n"
               "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
               "        return None")),
    ("patching: torch.Tensor method", "patching", make(tail="torch.Tensor.__eq__ = lambda a, b: True")),
    ("introspection: gc", "introspection", make(header="import gc")),
    ("introspection: globals()", "introspection", make(forward='return globals()["Model"]()(x)')),
    ("introspection: frames", "introspection",
     make(header="import sys", forward="ref = sys._getframe(1).f_globals\nreturn scale.scale_cuda(x)")),
    ("hidden-code: exec", "hidden-code", make(tail='exec("import torch")')),
    ("hidden-code: eval", "hidden-code", make(forward='return eval("x * 2")')),
    ("hidden-code: ctypes", "hidden-code", make(header="import ctypes")),
    ("hidden-code: open", "hidden-code", make(forward='open("/tmp/out.bin", "rb")\nreturn scale.scale_cuda(x)')),
    ("hidden-code: torch.load", "hidden-code", make(forward='return torch.load("/tmp/expected.pt")')),
    ("hidden-code: cpp_extension.load", "hidden-code",
     make(header="from torch.utils import cpp_extension",
          tail='other = cpp_extension.load(name="other", sources=["kernel.cu"])')),
    ("hidden-code: triton", "hidden-code", make(header="import triton")),
    ("hidden-code: dlopen", "hidden-code", make(cuda=cuda_with(host='    void* h = dlopen("libx.so", 1);'))),
    ("output-cache: lru_cache", "output-cache",
     make(header="import functools", forward="return cached(x)",
          tail="@functools.lru_cache(maxsize=None)\ndef cached(t):\n    return scale.scale_cuda(t)")),
    ("output-cache: dict keyed on inputs", "output-cache",
     make(init="self._cache = {}",
          forward="key = x.data_ptr()\nif key not in self._cache:\n    self._cache[key] = scale.scale_cuda(x)\n"
                  "return self._cache[key]")),
    ("output-cache: id()", "output-cache",
     make(init="self.last = None", forward="if self.last == id(x):\n    return self.out\nreturn scale.scale_cuda(x)")),
    ("output-cache: returns state from an earlier call", "output-cache",
     make(init="self.out = None",
          forward="if self.out is None:\n    self.out = scale.scale_cuda(x)\nreturn self.out")),
    ("build-flags: -wrapper runs a program of the candidate's choosing", "build-flags",
     make(load_extra=',\n    extra_cflags=["-O3", "-wrapper", "/bin/sh,-c,cat $HOME/secret"]')),
    ("build-flags: dependency file written into the home", "build-flags",
     make(load_extra=',\n    extra_cflags=["-MD", "-MF", "/root/x", "-MT", "text"]')),
    ("build-flags: -include of a home file through nvcc's host compiler", "build-flags",
     make(load_extra=',\n    extra_cuda_cflags=["-Xcompiler", "-include,/root/secret"]')),
    ("build-flags: linker script from a flag bound to a name", "build-flags",
     make(header='LD = ["-Wl,-T,/root/evil.ld"]', load_extra=",\n    extra_ldflags=LD")),
    ("build-flags: build_directory", "build-flags", make(load_extra=',\n    build_directory="/root/.cache/x"')),
    ("build-flags: absolute include path", "build-flags", make(load_extra=',\n    extra_include_paths=["/root"]')),
    ("source-size: a constant expression of a billion characters", "source-size",
     make(header='PAD = "x" * 1000000000')),
    ("source-size: an integer squared past 4096 bits", "source-size",
     make(header="N = 10\n" + "N *= N\n" * 40)),
    ("source-size: a file over 1 MB", "source-size", make(tail="# " + "x" * 1_000_001)),
]

# (case id, candidate source) -- must produce no violation at all (look-alikes of the hacks above).
ACCEPTED: list[tuple[str, str]] = [
    ("plain", make()),
    ("qualified load_inline", make().replace("scale = load_inline(", "scale = torch.utils.cpp_extension.load_inline(")),
    ("module alias load_inline", make(header="from torch.utils import cpp_extension").replace(
        "scale = load_inline(", "scale = cpp_extension.load_inline(")),
    ("torch.nn.Module base", make(bases="torch.nn.Module")),
    ("imported Module base", make(header="from torch.nn import Module", bases="Module")),
    ("launch_bounds kernel",
     make(wrapper="__global__ void __launch_bounds__(256) other_kernel(float* y) { y[0] = 1.f; }\n")),
    ("kernel launched as a CUDA graph node",
     make(cuda=GOOD_CUDA.replace(
         "scale_kernel<<<(n + threads - 1) / threads, threads>>>(x_c.data_ptr<float>(), y.data_ptr<float>(), n);",
         "cudaGraph_t g; cudaGraphExec_t e; cudaGraphNode_t node; cudaKernelNodeParams p = {};\n"
         "    p.func = (void*)scale_kernel;\n    cudaGraphCreate(&g, 0);\n"
         "    cudaGraphAddKernelNode(&node, g, nullptr, 0, &p);\n    cudaGraphInstantiate(&e, g, 0);\n"
         "    cudaGraphLaunch(e, 0);"))),
    ("kernel declared then defined", make(wrapper="__global__ void late_kernel(float* y);\n"
                                                  "__global__ void late_kernel(float* y) { y[threadIdx.x] = 0.f; }\n")),
    ("cudaLaunchKernel launch", make(cuda=GOOD_CUDA.replace(
        "scale_kernel<<<(n + threads - 1) / threads, threads>>>(x_c.data_ptr<float>(), y.data_ptr<float>(), n);",
        "const float* xp = x_c.data_ptr<float>(); float* yp = y.data_ptr<float>();\n"
        "    void* args[] = {&xp, &yp, &n};\n"
        "    cudaLaunchKernel((const void*)scale_kernel, dim3((n + 255) / 256), dim3(256), args, 0, 0);"))),
    ("allocation, views and metadata in forward",
     make(forward="""
        assert x.is_cuda, "x must be on the GPU"
        x = x.contiguous().view(-1)
        n = x.numel()
        rows = x.size(0) * 1
        blocks = (n + 255) // 256
        out = torch.empty_like(x)
        tmp = torch.zeros(rows, device=x.device, dtype=x.dtype)
        y = scale.scale_cuda(x.reshape(-1, 1).squeeze(1))
        return y.view(x.shape[0], -1).reshape(x.shape)
        """)),
    ("parameters and init", make(
        header="import math",
        init="""
        self.weight = nn.Parameter(torch.randn(16, 16) * 0.02)
        self.bias = nn.Parameter(torch.zeros(16))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        self.register_buffer("running", torch.ones(16))
        self.eval()
        """,
        forward="return scale.scale_cuda(x)")),
    ("layer holding weights", make(
        init="self.conv = nn.Conv2d(3, 8, 3)\nself.blocks = nn.ModuleList([nn.Linear(4, 4)])",
        forward="w = self.conv.weight.contiguous()\nreturn scale.scale_cuda(x)")),
    ("torch compute in __init__ (weight preprocessing)", make(
        header="import torch.nn.functional as F",
        init="w = torch.randn(4, 4)\nself.weight = nn.Parameter(F.normalize(w, dim=1) @ w.t())")),
    ("extension function named like a torch op", make(functions='["matmul"]', forward="return scale.matmul(x, x)")),
    ("extension through self attribute", make(init="self.ext = scale", forward="return self.ext.scale_cuda(x)")),
    ("module-level helper wrapping the extension", make(
        forward="return launch(x)", tail="def launch(t):\n    return scale.scale_cuda(t.contiguous())")),
    ("scalar arguments with arithmetic", make(signature="self, x, dim: int = 1",
                                              forward="axis = dim + 1\nreturn scale.scale_cuda(x)")),
    ("python set and math in forward", make(header="import math", forward="""
        seen = set()
        seen.add(1)
        k = math.exp(1.0) * 2
        return scale.scale_cuda(x)
        """)),
    ("comments and strings mentioning torch ops and streams", make(cuda=cuda_with(
        kernel_body="// faster than torch.matmul, cuBLAS or torch::matmul; no extra stream or std::thread\n"
                    "    if (i < n) { y[i] = 2.0f * x[i]; }",
        host='    TORCH_CHECK(n > 0, "torch::matmul fallback removed; cudaStreamCreate not used");'))),
    ("current stream launch", make(cuda="#include <ATen/cuda/CUDAContext.h>\n" + GOOD_CUDA.replace(
        "threads>>>(", "threads, 0, at::cuda::getCurrentCUDAStream()>>>("))),
    ("c10 current stream and guard", make(cuda="#include <c10/cuda/CUDAGuard.h>\n" + cuda_with(
        host="    const at::cuda::OptionalCUDAGuard guard(x.device());\n"
             "    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();\n"
             "    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(x.device());\n"
             "    auto ws = torch::zeros({n}, opts);"))),
    ("current stream handle passed to the extension", make(
        forward="handle = torch.cuda.current_stream().cuda_stream\nreturn scale.scale_cuda(x)")),
    ("cached zero-argument extension builder", make(
        header="import functools", forward="return build().scale_cuda(x)",
        tail="@functools.lru_cache(maxsize=None)\ndef build():\n    return scale")),
    ("workspace buffers keyed by shape", make(init="self.buffers = {}", forward="""
        self.buffers[tuple(x.shape)] = torch.empty_like(x)
        return scale.scale_cuda(x)
        """)),
    ("torch.autograd.Function wrapper", make(forward="return ScaleFn.apply(x)", tail="""
        class ScaleFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return scale.scale_cuda(t)
        """)),
    ("torch.cuda.current_stream and synchronize", make(
        forward="stream = torch.cuda.current_stream()\ntorch.cuda.synchronize()\nreturn scale.scale_cuda(x)")),
    ("cub block-level primitives", make(cuda="#include <cub/block/block_reduce.cuh>\n" + cuda_with(
        kernel_body="typedef cub::BlockReduce<float, 256> BlockReduce;\n"
                    "    __shared__ typename BlockReduce::TempStorage temp;\n"
                    "    float v = BlockReduce(temp).Sum(i < n ? x[i] : 0.f);\n"
                    "    if (threadIdx.x == 0) y[blockIdx.x] = v;"))),
    ("try/finally without except", make(forward="try:\n    out = scale.scale_cuda(x)\nfinally:\n    pass\nreturn out")),
    ("unused copy of the reference", make(tail="class Model(nn.Module):\n    def forward(self, x):\n"
                                               "        return torch.matmul(x, x)")),
    ("setattr on self", make(init='setattr(self, "weight", nn.Parameter(torch.ones(4)))')),
    ("sys and time used harmlessly", make(header="import sys\nimport time",
                                          forward="limit = sys.maxsize\nt0 = time.time()\nreturn scale.scale_cuda(x)")),
    ("lazy workspace buffer", make(init="self.workspace = None", forward="""
        if self.workspace is None:
            self.workspace = torch.empty(1024, device=x.device)
        return scale.scale_cuda(x)
        """)),
    ("test code under a main guard", make(tail="""
        if __name__ == "__main__":
            import threading
            print(torch.matmul(torch.randn(2, 2), torch.randn(2, 2)))
        """)),
    ("forward inherited from the candidate's own base class", make(bases="_Base", header="""
        class _Base(nn.Module):
            def forward(self, x):
                return scale.scale_cuda(x)
        """).replace("        super().__init__()\n        pass\n\n    def forward(self, x):\n"
                     "        return scale.scale_cuda(x)\n", "        super().__init__()\n", 1)),
    ("current stream held in a variable, then its handle", make(
        forward="stream = torch.cuda.current_stream()\nhandle = stream.cuda_stream\nreturn scale.scale_cuda(x)")),
    ("current stream of a device kept on self", make(
        init="self.stream = torch.cuda.current_stream(torch.device('cuda'))",
        forward="return scale.scale_cuda(x, self.stream.cuda_stream)")),
    ("at::ceil_div in the wrapper", make(cuda=cuda_with(
        host="    const int blocks = at::ceil_div(n, 256);\n    (void)blocks;"))),
    ("get_inputs in the candidate",
     make(tail="def get_inputs():\n    return [torch.randn(16).sum(0, keepdim=True) * 2]")),
    ("flags real kernels use", make(load_extra=',\n    extra_cflags=["-O3", "-ffast-math", "-DNDEBUG"],\n'
                                   '    extra_cuda_cflags=["-O3", "--use_fast_math", "-Xptxas -v", "-lineinfo",'
                                   ' "-arch=sm_90a", "-gencode arch=compute_90,code=sm_90", "-std=c++17",'
                                   ' "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__", "-maxrregcount=64"],\n'
                                   '    extra_ldflags=["-lcublas -lcublasLt", "-L/usr/local/cuda/lib64"],\n'
                                   '    extra_include_paths=["include"]')),
    ("a big but bounded constant", make(header='PAD = "// " + "x" * 100000 + "\\n"')),
]
