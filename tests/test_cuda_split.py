"""The fast-path split on text: what goes where, launch rewriting, and every fallback reason."""

from __future__ import annotations

import re

import pytest

from kevin_agent.evaluate.build.chunks import SplitRefused, blank_comments_and_literals, raw_chunks
from kevin_agent.evaluate.build.layout import cpp_is_declarations_only
from kevin_agent.evaluate.build.log import errors_only_in, trim_errors
from kevin_agent.evaluate.build.split import split_cuda_source

KERNEL = """
__global__ void add_kernel(const float* __restrict__ a, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""
WRAPPER = """
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
BASIC = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n" + KERNEL + WRAPPER


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_kernel_goes_to_cu_without_torch_and_wrapper_to_cpp():
    out = split_cuda_source(BASIC)
    assert "torch/extension.h" not in out.device_cu
    assert "torch::" not in out.device_cu
    assert "__global__ void add_kernel" in out.device_cu
    assert "__global__" not in out.host_cpp
    assert "<<<" not in out.host_cpp
    assert "torch::Tensor add(" in out.host_cpp
    assert out.kernels == ("add_kernel",)


def test_launch_becomes_launcher_call_on_default_stream_zero():
    out = split_cuda_source(BASIC)
    assert "kevin_launch_add_kernel((n + 255) / 256, 256, 0, 0, a.data_ptr<float>()" in out.host_cpp
    assert re.search(
        r"void kevin_launch_add_kernel\(dim3 kevin_grid, dim3 kevin_block, size_t kevin_smem, "
        r"cudaStream_t kevin_stream, const float\* __restrict__ kevin_a0, const float\* kevin_a1, "
        r"float\* kevin_a2, int kevin_a3\)", out.device_cu)
    assert ("add_kernel<<<kevin_grid, kevin_block, kevin_smem, kevin_stream>>>(kevin_a0, kevin_a1, kevin_a2, "
            "kevin_a3);") in out.device_cu
    assert ("void kevin_launch_add_kernel(dim3, dim3, size_t, cudaStream_t, const float* __restrict__, const float*, "
            "float*, int);") in out.host_cpp


def test_smem_and_stream_are_passed_through():
    src = BASIC.replace("<<<(n + 255) / 256, 256>>>", "<<<blocks, dim3(16, 16), 1024 * sizeof(float), "
                                                      "at::cuda::getCurrentCUDAStream()>>>")
    src = src.replace("int n = a.numel();", "int n = a.numel(); int blocks = 4;")
    out = split_cuda_source(src)
    assert ("kevin_launch_add_kernel(blocks, dim3(16, 16), 1024 * sizeof(float), "
            "at::cuda::getCurrentCUDAStream(), ") in out.host_cpp


def test_line_directives_keep_candidate_line_numbers():
    out = split_cuda_source(BASIC)
    kernel_line = BASIC.splitlines().index("__global__ void add_kernel(const float* __restrict__ a, const float* b, "
                                           "float* out, int n) {") + 1
    wrapper_line = BASIC.splitlines().index("torch::Tensor add(torch::Tensor a, torch::Tensor b) {") + 1
    assert f'#line {kernel_line} "cuda_sources"\n__global__ void add_kernel' in out.device_cu
    assert f'#line {wrapper_line} "cuda_sources"\ntorch::Tensor add(' in out.host_cpp


def test_multiline_launch_keeps_argument_lines():
    src = BASIC.replace(
        "add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);",
        "add_kernel<<<(n + 255) / 256,\n        256>>>(\n    a.data_ptr<float>(),\n"
        "    b.data_ptr<float>(), out.data_ptr<float>(), n);",
    )
    out = split_cuda_source(src)
    host_body = out.host_cpp[out.host_cpp.index("torch::Tensor add("):]
    orig_body = src[src.index("torch::Tensor add("):]
    assert host_body.count("\n") == orig_body.count("\n")
    for needle in ("b.data_ptr<float>(), out.data_ptr<float>(), n", "return out;"):
        assert ([i for i, ln in enumerate(host_body.splitlines()) if needle in ln]
                == [i for i, ln in enumerate(orig_body.splitlines()) if needle in ln])


def test_shared_pieces_go_to_both_sides():
    src = (
        "#include <torch/extension.h>\n#define BLOCK 256\nconstexpr int kTile = 32;\n"
        "struct Params { int n; float scale; };\nstatic inline int ceil_div(int a, int b) { return (a + b - 1) / b; }\n"
        "__global__ void k(Params p, float* out) { out[threadIdx.x] = p.scale * kTile; }\n"
        "torch::Tensor f(torch::Tensor x) { Params p{(int)x.numel(), 2.0f};\n"
        "  k<<<ceil_div(p.n, BLOCK), BLOCK>>>(p, x.data_ptr<float>()); return x; }\n"
    )
    out = split_cuda_source(src)
    for piece in ("#define BLOCK 256", "constexpr int kTile = 32;", "struct Params", "static inline int ceil_div"):
        assert piece in out.device_cu and piece in out.host_cpp, piece
    assert "kevin_launch_k(dim3, dim3, size_t, cudaStream_t, Params, float*);" in out.host_cpp


def test_device_functions_and_device_headers_stay_device_side():
    src = (
        "#include <torch/extension.h>\n#include <cuda_fp16.h>\n#include <cub/cub.cuh>\n"
        "__device__ __forceinline__ float warp_sum(float v) { for (int o = 16; o > 0; o >>= 1) v += "
        "__shfl_down_sync(0xffffffff, v, o); return v; }\n"
        "__global__ void k(float* x) { x[0] = warp_sum(x[threadIdx.x]); }\n"
        "torch::Tensor f(torch::Tensor x) { k<<<1, 32>>>(x.data_ptr<float>()); return x; }\n"
    )
    out = split_cuda_source(src)
    assert "warp_sum" in out.device_cu and "warp_sum" not in out.host_cpp
    assert "cub/cub.cuh" in out.device_cu and "cub/cub.cuh" not in out.host_cpp
    assert "cuda_fp16.h" in out.host_cpp  # plain CUDA headers are visible to both sides


def test_plain_launch_helper_stays_in_cu_with_prototype_for_host():
    src = (
        "#include <torch/extension.h>\n" + KERNEL +
        "void launch_add(const float* a, const float* b, float* o, int n) { add_kernel<<<(n+255)/256, 256>>>(a, b, o, "
        "n); }\n"
        "torch::Tensor add(torch::Tensor a, torch::Tensor b) { auto o = torch::empty_like(a);\n"
        "  launch_add(a.data_ptr<float>(), b.data_ptr<float>(), o.data_ptr<float>(), a.numel()); return o; }\n"
    )
    out = split_cuda_source(src)
    assert "add_kernel<<<(n+255)/256, 256>>>(a, b, o, n)" in out.device_cu
    assert "void launch_add(const float* a, const float* b, float* o, int n);" in out.host_cpp
    assert "kevin_launch_" not in out.host_cpp


def test_templated_kernel_in_floating_dispatch_gets_explicit_instantiations():
    src = (
        "#include <torch/extension.h>\n"
        "template <typename scalar_t>\n__global__ void scale(const scalar_t* x, scalar_t* y, scalar_t s, int n) { int "
        "i = threadIdx.x; if (i < n) y[i] = x[i] * s; }\n"
        "torch::Tensor f(torch::Tensor x) { auto y = torch::empty_like(x); int n = x.numel();\n"
        "  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"scale\", ([&] {\n"
        "    scale<scalar_t><<<1, 256>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), (scalar_t)2, n);\n  }));\n"
        "  return y; }\n"
    )
    out = split_cuda_source(src)
    assert ("template void kevin_launch_scale<float>(dim3, dim3, size_t, cudaStream_t, const float*, float*, float, "
            "int);") in out.device_cu
    assert ("template void kevin_launch_scale<double>(dim3, dim3, size_t, cudaStream_t, const double*, double*, "
            "double, int);") in out.device_cu
    assert "kevin_launch_scale<scalar_t>(1, 256, 0, 0, " in out.host_cpp
    assert "template <typename scalar_t> void kevin_launch_scale(" in out.host_cpp


def test_templated_kernel_with_concrete_args():
    src = (
        "#include <torch/extension.h>\ntemplate <int BS>\n__global__ void k(float* x) { x[threadIdx.x] *= BS; }\n"
        "torch::Tensor f(torch::Tensor x) { k<128><<<1, 128>>>(x.data_ptr<float>()); return x; }\n"
    )
    out = split_cuda_source(src)
    assert "template void kevin_launch_k<128>(dim3, dim3, size_t, cudaStream_t, float*);" in out.device_cu
    assert "kevin_launch_k<128>(1, 128, 0, 0, x.data_ptr<float>())" in out.host_cpp


def test_comments_and_strings_do_not_confuse_the_scanner():
    src = BASIC.replace("int n = a.numel();", 'int n = a.numel(); const char* s = "}{ <<<x>>>(;"; // } <<< {\n /* { */')
    out = split_cuda_source(src)
    assert '"}{ <<<x>>>(;"' in out.host_cpp
    assert out.host_cpp.count("kevin_launch_add_kernel((n + 255)") == 1


def test_blanking_keeps_length_and_newlines():
    src = 'a /* x\ny */ "q\\"}" // c\\\nstill comment\n\'}\' b'
    blanked = blank_comments_and_literals(src)
    assert len(blanked) == len(src)
    assert blanked.count("\n") == src.count("\n")
    assert "}" not in blanked and "still" not in blanked and blanked.endswith("b")


def test_chunks_group_conditional_directive_blocks_and_continuations():
    src = ("#ifndef M_PI\n#define M_PI 3.14159\n#endif\n#define ADD(a, b) \\\n  ((a) + (b))\nconst int x = 1;\n"
           "struct S { int a; } s_default;\nvoid f() { }\n")
    chunks = raw_chunks(src)
    assert [c.preprocessor for c in chunks] == [True, True, False, False, False]
    assert chunks[0].text.startswith("#ifndef") and "#endif" in chunks[0].text
    assert chunks[1].text.rstrip().endswith("((a) + (b))")
    assert [c.line for c in chunks] == [1, 4, 6, 7, 8]


@pytest.mark.parametrize(
    "source, reason",
    [
        ("#include <torch/extension.h>\nnamespace { __global__ void k(float* x) {} }\n"
         "torch::Tensor f(torch::Tensor x) { k<<<1,1>>>(x.data_ptr<float>()); return x; }\n", "namespace"),
        ("#include <torch/extension.h>\ntemplate <typename T> __global__ void k(T* x) {}\n"
         "torch::Tensor f(torch::Tensor x) { k<<<1,1>>>(x.data_ptr<float>()); return x; }\n", "deduced template"),
        ("#include <torch/extension.h>\n__constant__ float w[16];\n__global__ void k(float* x) { x[0] = w[0]; }\n"
         "torch::Tensor f(torch::Tensor x) { float h[16]; cudaMemcpyToSymbol(w, h, sizeof(h)); "
         "k<<<1,1>>>(x.data_ptr<float>()); return x; }\n", "constant memory written from host"),
        ("#include <torch/extension.h>\nint counter = 0;\n__global__ void k(float* x, int c) { x[0] = c; }\n"
         "void bump() { counter++; }\ntorch::Tensor f(torch::Tensor x) { counter++; k<<<1,1>>>(x.data_ptr<float>(), "
         "counter); return x; }\n", "non-const global 'counter'"),
        ("#include <torch/extension.h>\n#define LAUNCH(k, n) k<<<n, 256>>>()\n__global__ void k() {}\n"
         "torch::Tensor f(torch::Tensor x) { LAUNCH(k, 1); return x; }\n", "inside a macro"),
        ("#include <torch/extension.h>\n__global__ void k(float* x) { x[0] = 1; \n", "unbalanced"),
        ("#include <torch/extension.h>\n__global__ void k(at::Half* x) { }\n"
         "torch::Tensor f(torch::Tensor x) { return x; }\n", "device code uses torch"),
        ("#include <torch/extension.h>\ntemplate <typename scalar_t> __global__ void k(scalar_t* x) {}\n"
         "torch::Tensor f(torch::Tensor x) {\n AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), \"k\", ([&] { "
         "k<scalar_t><<<1,1>>>(x.data_ptr<scalar_t>()); }));\n return x; }\n", "torch-only types"),
        ("#include <torch/extension.h>\n__global__ void k(float* x) {}\n"
         "torch::Tensor f(torch::Tensor x) { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, "
         "1024); k<<<1,1>>>(x.data_ptr<float>()); return x; }\n", "device-side name 'k'"),
        ("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { other_kernel<<<1,1>>>(x.data_ptr<float>()); "
         "return x; }\n__global__ void k() {}\n", "not a kernel of this source"),
        ("#include <torch/extension.h>\n#if 1\n__global__ void k() {}\n#endif\n", "#if block"),
        ('#include <torch/extension.h>\nconst char* s = R"(raw)";\n__global__ void k() {}\n', "raw string"),
        ("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n", "no kernel"),
        ("#include <torch/extension.h>\n__global__ void k(float x[4]) {}\n"
         "torch::Tensor f(torch::Tensor x) { float v[4]; k<<<1,1>>>(v); return x; }\n", "cannot copy"),
        ("#include <torch/extension.h>\n__global__ void k(float*) {}\n"
         "torch::Tensor f(torch::Tensor x) { k<<<1,1>>>(x.data_ptr<float>()); return x; }\n", "unnamed parameter"),
        ("#include <torch/extension.h>\n__global__ void k(float* x) {}\n"
         "torch::Tensor f(torch::Tensor x) { k<<<1>>>(x.data_ptr<float>()); return x; }\n", "configuration"),
        ("#include <torch/extension.h>\ntemplate <typename T> __global__ void k(T* x) {}\n"
         "torch::Tensor f(torch::Tensor x) { k<scalar_t><<<1,1>>>(x.data_ptr<float>()); return x; "
         "}\n", "outside a supported AT_DISPATCH"),
        ("#include <torch/extension.h>\ntemplate <int B> __global__ void k(float* x) {}\n"
         "torch::Tensor f(torch::Tensor x) { constexpr int kB = 64; k<kB><<<1,1>>>(x.data_ptr<float>()); return x; "
         "}\n", "not visible to the kernel file"),
    ],
)
def test_unsafe_sources_fall_back_with_a_reason(source, reason):
    with pytest.raises(SplitRefused) as info:
        split_cuda_source(source)
    assert reason in str(info.value)


def test_cpp_sources_of_prototypes_can_share_the_host_unit():
    assert cpp_is_declarations_only(("torch::Tensor add(torch::Tensor a, torch::Tensor b);",))
    assert cpp_is_declarations_only(("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor a);\nint g(int);",))
    assert not cpp_is_declarations_only(("torch::Tensor f(torch::Tensor a) { return a; }",))
    assert not cpp_is_declarations_only(("#define X 1\ntorch::Tensor f(torch::Tensor a);",))


def test_trim_errors_keeps_first_three_with_candidate_lines():
    log = "\n".join(
        ["[1/3] /usr/local/cuda/bin/nvcc ... -c kernels.cu -o kernels.o", "FAILED: kernels.o"]
        + [f'cuda_sources({10 + i}): error: identifier "x{i}" is undefined\n      y = x{i};\n'
           '          ^\n' for i in range(5)]
        + ["5 errors detected in the compilation of \"kernels.cu\"."]
    )
    trimmed = trim_errors(log)
    assert "cuda_sources(10): error" in trimmed and "cuda_sources(12): error" in trimmed
    assert "cuda_sources(13)" not in trimmed
    assert "y = x0;" in trimmed
    assert len(trim_errors(log * 50, max_chars=300)) <= 300
    assert errors_only_in(log, ("cuda_sources",))
    assert not errors_only_in(log + "\nhost.cpp:3:1: error: boom", ("cuda_sources",))


def test_trim_errors_gcc_format_and_linker():
    log = ("cuda_sources:21:5: error: 'foo' was not declared in this scope\n   21 |     foo();\n      |     ^~~\n"
           "/usr/bin/ld: main.o: undefined reference to `bar()'\n")
    trimmed = trim_errors(log)
    assert trimmed.startswith("cuda_sources:21:5: error: 'foo'")
    assert "undefined reference to `bar()'" in trimmed


def test_overloaded_kernel_falls_back_and_forward_declaration_is_fine():
    decl = ("#include <torch/extension.h>\n__global__ void k(float* x);\n__global__ void k(float* x) { x[0] = 1; }\n"
            "torch::Tensor f(torch::Tensor x) { k<<<1,1>>>(x.data_ptr<float>()); return x; }\n")
    assert "kevin_launch_k(1, 1, 0, 0, x.data_ptr<float>())" in split_cuda_source(decl).host_cpp
    overloaded = decl.replace("__global__ void k(float* x);", "__global__ void k(int* x) { x[0] = 1; }")
    with pytest.raises(SplitRefused, match="overloaded"):
        split_cuda_source(overloaded)
