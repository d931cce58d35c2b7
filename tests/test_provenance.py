"""Kernel provenance (kevin_agent.evaluate.provenance): own-kernel listing from real nvcc builds,
demangling, name tables, trace parsing, attribution and both policies, on recorded or hand-made
traces (tests/fixtures/provenance/README.md says which is which). No GPU needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kevin_agent.evaluate.provenance import demangle as D
from kevin_agent.evaluate.provenance import names as N
from kevin_agent.evaluate.provenance.attribution import OwnKernels, attribute, kernel_rows
from kevin_agent.evaluate.provenance.policy import (
    PARTIAL,
    STRICT,
    ProvenanceResult,
    judge,
    kernel_table,
    profile_feedback,
)
from kevin_agent.evaluate.provenance.symbols import ExtensionKernels, fatbin_kernels, list_kernels, stub_kernels
from kevin_agent.evaluate.provenance.trace import (
    FORWARD_ANNOTATION,
    KernelActivity,
    ProfileTrace,
    activities_from_chrome_trace,
    launch_count,
)

FIXTURES = Path(__file__).parent / "fixtures" / "provenance"
STYLES_CU = FIXTURES / "kernel_styles.cu"
SCENARIOS = sorted(p for p in FIXTURES.glob("*/*.json") if not p.name.startswith("raw_"))

# ---------- names the profiler reports (H100/H200), one per family ----------
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
DIRECT_COPY = ("void at::native::unrolled_elementwise_kernel<"
               "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
               "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
               "std::array<char*, 2ul>, "
               "4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
               "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
       "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<4u>, "
       "unsigned int, 2, 128, 1>(at::native::(anonymous namespace)::OpaqueType<4u>*, int, unsigned int)")
ARANGE = ("void (anonymous namespace)::elementwise_kernel_with_index<int, "
          "at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)"
          "::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(long)#1}>(int, ...)")
SGEMM_NAME = ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_"
              "execute_segment_k_off_kernel__5x_cublas")

KNOWN = [
    ("nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNT", N.LIBRARY, "cuBLAS"),
    (SGEMM_NAME, N.LIBRARY, "cuBLAS"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>"
     "(cutlass_80_simt_sgemm_128x128_8x4_nn_align1::Params)",
     N.LIBRARY, "CUTLASS"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
     "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >"
     "(cublasGemvParamsEx<...>, float, float)", N.LIBRARY, "cuBLAS"),
    ("ampere_sgemm_128x64_nn", N.LIBRARY, "cuBLAS"),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, "
     "float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, "
     "float*, int*)", N.LIBRARY, "cuBLAS"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_"
     "kernel__5x_cudnn", N.LIBRARY, "cuDNN"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
     "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", N.LIBRARY, "cuDNN"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_small_nn_v1", N.LIBRARY, "cuDNN"),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>"
     "(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, "
     "float, float, int, float const*, float const*, bool, int, int)", N.LIBRARY, "cuDNN"),
    ("void xmma_cudnn::gemm::kernel<xmma_cudnn::implicit_gemm::fprop::Kernel_traits>(xmma_cudnn::Params)",
     N.LIBRARY, "cuDNN"),
    ("void cutlass_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4>(...)",
     N.LIBRARY, "cuDNN"),
    ("void conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, float, float, float, float, float, float>"
     "(cudnnTensorStruct, float const*, cudnnFilterStruct, float const*, cudnnConvolutionStruct, cudnnTensorStruct, "
     "float*, float, float, cudnn::reduced_divisor, int, float const*, float const*, cudnnActivationStruct)",
     N.LIBRARY, "cuDNN"),
    ("void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)", N.LIBRARY, "cuDNN"),
    ("void regular_fft<256u, EPT_8, 32u, 4u, CONSTANT, 0u, OFFSET_POINTER, false, false, float, float, float2, float2>"
     "(kernel_arguments_t<unsigned int>)", N.LIBRARY, "cuFFT"),
    ("void vector_fft<2048u, EPT_8, 256u, 1u, CONSTANT, 0u, OFFSET_POINTER, false, false, float, float, float2, float2>"
     "(kernel_arguments_t<unsigned int>)", N.LIBRARY, "cuFFT"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", N.LIBRARY, "NCCL"),
    (FILL, N.TORCH, "PyTorch ATen"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<...>(...)::{lambda(int)#1}>"
     "(int, ...)",
     N.TORCH, "PyTorch ATen"),
    ("void at::native::reduce_kernel<512, 1, "
     "at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >"
     "(at::native::ReduceOp<...>)", N.TORCH, "PyTorch ATen"),
    (CAT, N.TORCH, "PyTorch ATen"),
    (DIRECT_COPY, N.TORCH, "PyTorch ATen"),
    ("void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
     "(float*, float const*, int, int, int, bool const*, int, bool)", N.TORCH, "PyTorch ATen"),
    ("void at::native::batch_norm_transform_input_channels_last_kernel<float, float, float, 4>(...)",
     N.TORCH, "PyTorch ATen"),
    (ARANGE, N.TORCH, "PyTorch ATen"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t, "
     "Flash_kernel_traits<64, 128, 128, 4, cutlass::half_t> >, false, false, false, false, true, true, false, false>"
     "(pytorch_flash::Flash_fwd_params)", N.TORCH, "PyTorch attention (FlashAttention)"),
    ("triton_poi_fused_add_relu_0", N.GENERATED, "Triton (inductor)"),
    ("triton_per_fused__softmax_1", N.GENERATED, "Triton (inductor)"),
    ("triton_red_fused_mean_2", N.GENERATED, "Triton (inductor)"),
    ("triton_tem_fused_mm_0", N.GENERATED, "Triton (inductor)"),
]


def act(name: str, ms: float, calls: int = 1, context: tuple[str, ...] = (), kind: str = "kernel") -> KernelActivity:
    return KernelActivity(name, kind, calls, ms, context)


# ---------- names ----------

@pytest.mark.parametrize("name,origin,family", KNOWN, ids=[k[0][:40] for k in KNOWN])
def test_family_table_knows_the_profiler_names(name, origin, family):
    assert N.family_of(name) == (origin, family)


@pytest.mark.parametrize("name,qualified", [
    (FILL, "at::native::vectorized_elementwise_kernel"),
    ("(anonymous namespace)::anon_kernel(float*)", "(anonymous namespace)::anon_kernel"),
    ("void scale_kernel<float>(float const*, float*, int)", "scale_kernel"),
    ("add_kernel(float const*, float const*, float*, int)", "add_kernel"),
    ("c_kernel", "c_kernel"),
    (CAT, "at::native::(anonymous namespace)::CatArrayBatchedCopy"),
    ("void functor_kernel<Square, 4>(Square, float*, long)", "functor_kernel"),
    ("_ZN2my3ops13nested_kernelEPfi", "my::ops::nested_kernel"),
    ("_ZN36_GLOBAL__N__8b065db1_4_k_cu_03e9d9cf11anon_kernelEPf", "(anonymous namespace)::anon_kernel"),
    ("_Z12scale_kernelIfEvPKT_PS0_i", "scale_kernel"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
])
def test_qualified_name(name, qualified):
    assert N.qualified_name(name) == qualified


def test_own_style_names_claim_no_family():
    for name in ("add_kernel(float const*, float const*, float*, int)", "elementwise_kernel(float*)",
                 "my::gemm_kernel(float*)", "(anonymous namespace)::conv2d_kernel(float*)", "fused_softmax_kernel"):
        assert N.family_of(name) is None, name


@pytest.mark.parametrize("name,kind,role", [
    (FILL, "kernel", N.FILL), (ARANGE, "kernel", N.FILL), ("Memset (Device)", "memset", N.FILL),
    (DIRECT_COPY, "kernel", N.COPY), ("Memcpy DtoD (Device -> Device)", "memcpy", N.COPY),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy", N.FILL),  # host data cannot depend on the inputs
    ("Memcpy DtoH (Device -> Pageable)", "memcpy", N.COPY),
    (ADD, "kernel", N.COMPUTE), (CAT, "kernel", N.COMPUTE),
])
def test_roles(name, kind, role):
    assert N.role_of(name, kind) == role


def test_short_name_drops_void_and_parameters():
    assert N.short_name("void scale_kernel<float>(float const*, float*, int)") == "scale_kernel<float>"
    assert N.short_name("(anonymous namespace)::k(float*)") == "(anonymous namespace)::k"
    assert N.short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert len(N.short_name(FILL, 40)) == 40


# ---------- demangling ----------

MANGLED = {
    "_Z10add_kernelPKfS0_Pfi": "add_kernel(float const*, float const*, float*, int)",
    "_Z12scale_kernelIfEvPKT_PS0_i": "void scale_kernel<float>(float const*, float*, int)",
    "_ZN36_GLOBAL__N__8b065db1_4_k_cu_03e9d9cf11anon_kernelEPf": "(anonymous namespace)::anon_kernel(float*)",
    "_ZN2my3ops13nested_kernelEPfi": "my::ops::nested_kernel(float*, int)",
}


def test_demangle_matches_the_profiler_spelling():
    assert D.backend() == "cxa"
    assert D.demangle_many(list(MANGLED) + ["c_kernel", "nvjet_x"]) == MANGLED
    assert D.demangle("c_kernel") is None


def test_no_demangler_means_mangled_matching(monkeypatch, tmp_path):
    monkeypatch.setattr(D, "_cxa", lambda: None)
    spy = tmp_path / "ran"
    (tmp_path / "c++filt").write_text(f"#!/bin/sh\ntouch {spy}\ncat\n")
    (tmp_path / "c++filt").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    assert D.backend() == "none"
    assert D.demangle_many(list(MANGLED)) == {}
    assert not spy.exists()  # no program runs on names a build made, even with a c++filt on PATH
    own = OwnKernels(["_Z10add_kernelPKfS0_Pfi"], demangled={})
    assert own.match("_Z10add_kernelPKfS0_Pfi") == "exact"  # the profiler keeps names it cannot demangle
    assert own.match("add_kernel(float const*, float const*, float*, int)") == "base"  # parsed from the mangling


# ---------- stub parsing without a compiler ----------

def test_stub_symbols_of_every_shape():
    symbols = [
        "_Z37__device_stub__Z10add_kernelPKfS0_PfiPKfS0_Pfi",
        "_Z37__device_stub__Z10add_kernelPKfS0_PfiPKfS0_Pfi.cold",
        "_ZZL43__device_stub__Z12scale_kernelIfEvPKT_PS0_iPKfPfiE8__handle",  # inlined template stub's static
        "_ZGVZ71__device_stub__ZN36_GLOBAL__N__8b065db1_4_k_cu_03e9d9cf11anon_kernelEPfPfE5__tmp",
        "_Z27__device_stub__Z8c_kernelPfPf",
        "_Z10add_kernelPKfS0_Pfi",  # the host-side launcher: not a stub
        "__device_stub__",  # malformed
        "_Z99__device_stub__Zshort",  # length runs past the end
    ]
    assert stub_kernels(symbols) == {
        "_Z10add_kernelPKfS0_Pfi", "_Z12scale_kernelIfEvPKT_PS0_i",
        "_ZN36_GLOBAL__N__8b065db1_4_k_cu_03e9d9cf11anon_kernelEPf", "_Z8c_kernelPf",
    }


def test_unreadable_files_become_notes(tmp_path):
    missing = list_kernels(str(tmp_path / "nope.so"))
    assert not missing.ok and "cannot read" in missing.notes[0]
    text = tmp_path / "text.so"
    text.write_text("not an ELF file")
    assert not list_kernels(str(text)).ok
    assert fatbin_kernels(b"\x00" * 64) == (set(), [])


# ---------- real builds ----------

NVCC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
needs_nvcc = pytest.mark.skipif(not NVCC.is_file(), reason="nvcc not installed")

STYLE_KERNELS = {
    "add_kernel(float const*, float const*, float*, long)",
    "void scale_kernel<float>(float const*, float*, float, long)",
    "void scale_kernel<double>(double const*, double*, double, long)",
    "(anonymous namespace)::anon_relu_kernel(float const*, float*, long)",
    "kev::ops::bias_relu_kernel(float const*, float const*, float*, long, long, long)",
    "cg_sum_kernel(float const*, float*, long)",
    "block_sum_kernel(float const*, float*, long)",
    "void functor_kernel<Square, 4>(Square, float*, long)",
    "uses_helper_kernel(float*)",
}


def _nvcc_build(tmp: Path, name: str, *extra: str) -> Path:
    """The extension's two steps as torch runs them: nvcc -c for sm_90, then a shared link."""
    obj, so = tmp / f"{name}.cuda.o", tmp / f"{name}.so"
    subprocess.run([str(NVCC), "-c", str(STYLES_CU), "-o", str(obj), "-gencode=arch=compute_90,code=sm_90",
                    "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "--expt-relaxed-constexpr", *extra],
                   check=True, capture_output=True, text=True)
    subprocess.run([str(NVCC), "-shared", str(obj), "-o", str(so)], check=True, capture_output=True, text=True)
    return so


@pytest.fixture(scope="module")
def styles_so(tmp_path_factory) -> Path:
    if not NVCC.is_file():
        pytest.skip("nvcc not installed")
    return _nvcc_build(tmp_path_factory.mktemp("styles"), "styles")


def _profiled_names(listing: ExtensionKernels) -> set[str]:
    own = OwnKernels(listing.kernels)
    return set(own.demangled.values()) | {k for k in listing.kernels if not k.startswith("_Z")}


@needs_nvcc
def test_every_kernel_style_is_listed_and_attributed_own(styles_so):
    listing = list_kernels(str(styles_so))
    assert listing.from_stubs >= 12 and listing.from_fatbin >= 12, listing
    names = _profiled_names(listing)
    assert STYLE_KERNELS <= names
    assert "c_token_kernel" in listing.kernels  # extern "C": the cubin's entry name, as the profiler shows it
    assert not any("helper_not_a_kernel" in n for n in names)  # a __device__ function is no kernel
    assert not any("BlockReduce" in N.qualified_name(n) for n in names)  # block primitives inline into ours
    own = OwnKernels(listing.kernels)
    for name in STYLE_KERNELS | {"c_token_kernel"}:
        assert attribute(act(name, 1.0), own).origin == N.OWN, name


@needs_nvcc
def test_cub_device_reduce_kernels_in_the_extension_are_library(styles_so):
    listing = list_kernels(str(styles_so))
    own = OwnKernels(listing.kernels)
    cub = [d for d in own.demangled.values() if "DeviceReduce" in d]
    assert len(cub) >= 2
    for name in cub:
        verdict = attribute(act(name, 1.0), own)
        assert (verdict.origin, verdict.family) == (N.LIBRARY, "CUB/Thrust (compiled into your extension)")


@needs_nvcc
def test_stripped_extension_is_listed_from_its_cubin(styles_so, tmp_path):
    if shutil.which("strip") is None:
        pytest.skip("strip not installed")
    stripped = tmp_path / "stripped.so"
    subprocess.run(["strip", "--strip-all", str(styles_so), "-o", str(stripped)], check=True)
    listing = list_kernels(str(stripped))
    assert listing.from_stubs == 0 and any("stripped" in n for n in listing.notes)
    assert STYLE_KERNELS <= _profiled_names(listing)


@needs_nvcc
def test_compressed_fatbin_is_listed_from_host_stubs(tmp_path):
    listing = list_kernels(str(_nvcc_build(tmp_path, "compressed", "-Xfatbin=-compress-all")))
    assert listing.from_fatbin == 0 and any("compressed" in n for n in listing.notes)
    assert STYLE_KERNELS <= _profiled_names(listing)
    own = OwnKernels(listing.kernels)
    assert attribute(act("c_token_kernel", 1.0), own).how == "base"  # extern "C": only the stub's C++ spelling


@pytest.mark.nvcc
def test_load_inline_extension_lists_its_kernels(tmp_path):
    """torch's own build path, once: cuda_sources without torch headers keep it to about a minute."""
    from torch.utils.cpp_extension import load_inline

    module = load_inline(name="kevin_provenance_styles",
                         cpp_sources="int64_t launch_all(int64_t, int64_t, int64_t, int64_t);",
                         cuda_sources=STYLES_CU.read_text(), functions=["launch_all"], build_directory=str(tmp_path),
                         extra_cuda_cflags=["-O3"])
    listing = list_kernels(str(module.__file__))
    assert listing.from_stubs >= 12 and listing.from_fatbin >= 12, listing
    assert STYLE_KERNELS | {"c_token_kernel"} <= _profiled_names(listing)


# ---------- trace format and parsing ----------

def test_chrome_trace_activities_keep_the_forward_range_and_launch_context():
    raw = json.loads((FIXTURES / "handmade" / "raw_conv_epilogue.chrome.json").read_text())
    acts = {a.name: a for a in activities_from_chrome_trace(raw)}
    assert not any("FillFunctor" in n for n in acts)  # launched before the kevin::forward range
    fprop = next(a for n, a in acts.items() if n.startswith("sm90_xmma_fprop"))
    assert fprop.context[0] == "aten::conv2d" and fprop.launcher == "aten::cudnn_convolution"
    assert fprop.api == "cuLaunchKernelEx" and fprop.ms == pytest.approx(0.4105)
    own = acts["kev::ops::bias_relu_kernel(float const*, float const*, float*, long, long, long)"]
    assert (own.calls, own.context, own.ms) == (2, (), pytest.approx(0.04425))
    memset = acts["Memset (Device)"]
    assert memset.kind == "memset" and memset.context == ("aten::zeros", "aten::zero_")
    everything = activities_from_chrome_trace(raw, annotation=None)
    assert launch_count(everything) == launch_count(acts.values()) + 1


def test_chrome_trace_without_cpu_events_keeps_everything():
    raw = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 4, "dur": 1.0, "args": {}},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1},
    ]}
    acts = activities_from_chrome_trace(raw)
    assert sorted((a.name, a.kind, a.context) for a in acts) == [
        ("Memcpy DtoD (Device -> Device)", "memcpy", ()), ("k", "kernel", ())]


def test_trace_json_round_trip(tmp_path):
    trace = ProfileTrace([act("k(float*)", 0.5, 3, ("aten::mm",)), act("Memset (Device)", 0.01, kind="memset")],
                         "candidate", "hand-made", "H200", "2.11", {"note": "x"})
    path = tmp_path / "t.json"
    trace.save(path)
    again = ProfileTrace.load(path)
    assert again == trace and again.launches == 4
    with pytest.raises(ValueError):
        ProfileTrace.from_dict({"format": "something-else"})


# ---------- attribution ----------

def test_own_matching_exact_mangled_and_unambiguous_base():
    own = OwnKernels(["_Z10add_kernelPKfS0_Pfi", "_Z11gemv_kernelPf", "c_only"])
    assert own.match("add_kernel(float const*, float const*, float*, int)") == "exact"
    assert own.match("_Z10add_kernelPKfS0_Pfi") == "exact"
    assert own.match("add_kernel(double const*, double const*, double*, int)") == "base"
    assert own.match("c_only") == "exact"
    assert own.match("other::add_kernel(float*)") is None  # another namespace
    # "gemv_kernel" is also a cuBLAS kernel name: the base name alone is ambiguous, only the exact spelling counts
    assert own.match("gemv_kernel(float*)") == "exact"
    assert own.match("void gemv_kernel<float, 128>(float*)") is None


FUSED_OF_MINE = "mine(float*)"


def test_a_name_that_only_starts_like_an_own_kernel_is_not_own():
    """Own kernels match whole names, never prefixes: a foreign kernel called ``mine_v2`` or
    ``plain_c_impl`` next to own ``mine``/``plain_c`` is foreign compute, and strict rejects it."""
    own = ["_Z4minePf", "plain_c"]
    for name in ("mine_v2(float*)", "minefield(float*)", "plain_c_impl", "plain_cx(float*)"):
        result = judge([act(FUSED_OF_MINE, 0.01), act(name, 1.0)], own, 1, STRICT)
        assert not result.ok and "foreign compute kernels ran" in result.message, name
    assert judge([act(FUSED_OF_MINE, 0.01), act("plain_c", 1.0)], own, 1, STRICT).ok
    assert judge([act(FUSED_OF_MINE, 1.0)], own, 1, STRICT).ok


def test_launch_context_overrides_a_colliding_own_name():
    own = OwnKernels(["nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNT"])  # the candidate named its kernel like cuBLAS's
    mine = attribute(act("nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNT", 1.0), own)
    theirs = attribute(act("nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNT", 1.0, context=("aten::matmul", "aten::mm")), own)
    assert mine.origin == N.OWN
    assert (theirs.origin, theirs.family, theirs.how) == (N.LIBRARY, "cuBLAS", "collision")


def test_unknown_names_use_the_launch_context():
    own = OwnKernels(["_Z4minePf"])
    cases = {
        ("aten::conv2d", "aten::cudnn_convolution"): (N.LIBRARY, "cuDNN"),
        ("aten::linear", "aten::addmm"): (N.LIBRARY, "cuBLAS"),
        ("aten::fft_rfft", "aten::_fft_r2c"): (N.LIBRARY, "cuFFT"),
        ("aten::softmax", "aten::_softmax"): (N.TORCH, "PyTorch ATen"),
        ("Torch-Compiled Region: 0/0", "my_user_triton_kernel"): (N.GENERATED, "torch.compile region"),
        (): (N.OTHER, "unknown"),
    }
    for context, expected in cases.items():
        verdict = attribute(act("mystery_kernel_v3", 1.0, context=context), own)
        assert (verdict.origin, verdict.family) == expected, context
    assert attribute(act("nvjet_hsh_64x8_1x2", 1.0, context=("Torch-Compiled Region: 0/0",)), own).origin == N.LIBRARY


def test_memops_are_never_own():
    own = OwnKernels(["_Z4minePf"])
    torch_copy = attribute(act("Memcpy DtoD (Device -> Device)", 1.0, context=("aten::copy_",), kind="memcpy"), own)
    raw_memset = attribute(act("Memset (Device)", 1.0, kind="memset"), own)
    assert (torch_copy.origin, torch_copy.role) == (N.TORCH, N.COPY)
    assert (raw_memset.origin, raw_memset.role) == (N.OTHER, N.FILL)


def test_rows_aggregate_and_sort_by_time():
    rows = kernel_rows([act("a(float*)", 1.0, 2), act("a(float*)", 2.0, 1, ("x",)),
                        act(FILL, 1.0, context=("aten::fill_",))], OwnKernels(["_Z1aPf"]))
    assert [(r.name, r.origin, r.calls, r.ms, r.share) for r in rows] == [
        ("a(float*)", N.OWN, 3, 3.0, 0.75), (FILL, N.TORCH, 1, 1.0, 0.25)]
    assert rows[1].role == N.FILL and rows[1].called_from == "aten::fill_"


# ---------- policies on the scenario fixtures ----------

def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", SCENARIOS, ids=[f"{p.parent.name}/{p.stem}" for p in SCENARIOS])
def test_scenario_fixture_decisions(path):
    data = _load(path)
    if "expect" not in data:
        pytest.skip("recorded trace without a reviewed expect block")
    candidate = ProfileTrace.from_dict(data["candidate"])
    reference = ProfileTrace.from_dict(data["reference"]) if data.get("reference") else None
    ref_launches = reference.launches if reference else None
    strict = judge(candidate, data["own_kernels"], ref_launches, STRICT)
    partial = judge(candidate, data["own_kernels"], ref_launches, PARTIAL)
    got = {"strict": {"ok": strict.ok, "partial_would_accept": strict.partial_would_accept},
           "partial": {"ok": partial.ok}}
    assert got == data["expect"], strict.summary
    assert partial.partial_would_accept is None
    assert strict.partial_would_accept == partial.ok
    for result in (strict, partial):
        assert result.ok == (not result.reasons) and bool(result.message) == (not result.ok)
        assert sum(r.share for r in result.kernels) == pytest.approx(1.0)


def test_fixture_readme_lists_every_scenario():
    readme = (FIXTURES / "README.md").read_text()
    for path in SCENARIOS:
        assert path.stem in readme, path.stem


CONV = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution")
FPROP = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_g1_execute_kernel__5x_cudnn"
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
        "namespace)::launch_clamp_scalar(...)>(int, ...)")
OWN = ["_Z6fusedkPKfPf"]
FUSED = "fusedk(float const*, float*)"


def test_token_own_kernel_next_to_the_full_torch_fallback_is_rejected_by_both():
    reference = [act(FPROP, 0.4, context=CONV), act(ADD, 0.04, context=("aten::add_",)),
                 act(RELU, 0.04, context=("aten::relu",))]
    candidate = reference + [act(FUSED, 0.001)]
    strict, partial = (judge(candidate, OWN, launch_count(reference), p) for p in (STRICT, PARTIAL))
    assert not strict.ok and not partial.ok and strict.partial_would_accept is False
    assert "not fewer than the 3" in partial.message and "nothing was replaced" in partial.message


def test_cudnn_conv_with_a_fused_own_epilogue():
    reference = [act(FPROP, 0.4, context=CONV), act(ADD, 0.04, context=("aten::add_",)),
                 act(RELU, 0.04, context=("aten::relu",))]
    candidate = [act(FPROP, 0.4, context=CONV), act(FUSED, 0.05)]
    strict = judge(candidate, OWN, launch_count(reference), STRICT)
    partial = judge(candidate, OWN, launch_count(reference), PARTIAL)
    assert partial.ok and partial.own_share == pytest.approx(0.05 / 0.45)
    assert not strict.ok and strict.partial_would_accept is True
    assert "cuDNN sm90_xmma_fprop" in strict.message and "from aten::conv2d" in strict.message
    assert "88.9%" in strict.message and "policy strict" in strict.message
    assert "would accept" in strict.summary


def test_torch_compile_fallback_is_generated_and_rejected_by_both():
    candidate = [act("triton_poi_fused_add_relu_0", 0.01, context=("Torch-Compiled Region: 0/0",)), act(FUSED, 0.001)]
    for policy in (STRICT, PARTIAL):
        result = judge(candidate, OWN, 5, policy)
        assert not result.ok and "Triton (inductor) triton_poi_fused_add_relu_0" in result.message
    assert judge(candidate, OWN, 5, STRICT).partial_would_accept is False


def test_strict_fill_and_copy_allowances():
    fill = act(FILL, 0.1, context=("aten::zeros", "aten::zero_", "aten::fill_"))
    own = act(FUSED, 1.0)
    assert judge([fill, own], OWN, 1, STRICT).ok  # 9% fill
    just_under = act(DIRECT_COPY, 0.11, context=("aten::contiguous",))  # 9.9% copies
    assert judge([just_under, own], OWN, 1, STRICT).ok
    big_copy = act(DIRECT_COPY, 0.5, context=("aten::contiguous", "aten::clone", "aten::copy_"))
    rejected = judge([big_copy, own], OWN, 1, STRICT)
    assert not rejected.ok and "copies took 33.3%" in rejected.message and "at most 10%" in rejected.message
    big_fill = act(FILL, 1.1, context=("aten::ones",))  # 52.4% fills
    assert not judge([big_fill, own], OWN, 1, STRICT).ok
    assert judge([big_fill, own], OWN, 1, PARTIAL).ok  # fills are not counted as replaced-or-not launches


# Boundaries as fixed numbers (docs/provenance.md): fills at most 50% and copies at most 10% of the
# call's GPU time, each share applied only above its floor (fills 0.1 ms, copies 0.01 ms in total).

@pytest.mark.parametrize("fill_ms,ok", [(0.96, True), (0.98, True), (1.02, False), (1.10, False)])
def test_strict_fill_share_boundary_is_one_half(fill_ms, ok):
    """Next to 1 ms of own work: 0.98 ms of fills is 49.5%, 1.02 ms is 50.5%."""
    result = judge([act(FILL, fill_ms, context=("aten::zeros", "aten::zero_", "aten::fill_")), act(FUSED, 1.0)],
                   OWN, 1, STRICT)
    assert result.ok is ok, result.reasons
    if not ok:
        assert "fills took" in result.message and "at most 50%" in result.message


@pytest.mark.parametrize("copy_ms,ok", [(0.108, True), (0.110, True), (0.113, False), (0.125, False)])
def test_strict_copy_share_boundary_is_one_tenth(copy_ms, ok):
    """Next to 1 ms of own work: 0.110 ms of copies is 9.9%, 0.113 ms is 10.2%."""
    result = judge([act(DIRECT_COPY, copy_ms, context=("aten::contiguous",)), act(FUSED, 1.0)], OWN, 1, STRICT)
    assert result.ok is ok, result.reasons


@pytest.mark.parametrize("fill_ms,ok", [(0.05, True), (0.095, True), (0.105, False), (0.2, False)])
def test_strict_fill_floor_is_a_tenth_of_a_millisecond(fill_ms, ok):
    """Fills far above half the time (own work 0.01 ms) pass only while they total under 0.1 ms."""
    result = judge([act(FILL, fill_ms, context=("aten::zeros",)), act(FUSED, 0.01)], OWN, 1, STRICT)
    assert result.ok is ok, result.reasons


@pytest.mark.parametrize("copy_ms,ok", [(0.005, True), (0.0095, True), (0.0105, False), (0.02, False)])
def test_strict_copy_floor_is_ten_microseconds(copy_ms, ok):
    """Copies far above a tenth of the time (own work 0.001 ms) pass only while they total under 0.01 ms."""
    result = judge([act(DIRECT_COPY, copy_ms, context=("aten::contiguous",)), act(FUSED, 0.001)], OWN, 1, STRICT)
    assert result.ok is ok, result.reasons


def test_pure_own_matmul_with_a_zeroed_output_passes_partial_against_one_cublas_kernel():
    candidate = [act(FILL, 0.01, context=("aten::zeros",)), act(FUSED, 1.0)]
    assert judge(candidate, OWN, 1, PARTIAL).ok and judge(candidate, OWN, 1, STRICT).ok


def test_no_own_kernel_and_unknown_reference():
    only_torch = [act(ADD, 0.1, context=("aten::add",))]
    for policy in (STRICT, PARTIAL):
        result = judge(only_torch, OWN, None, policy)
        assert not result.ok and result.reasons[0] == "none of your own kernels ran"
    lib_plus_own = [act(FPROP, 0.4, context=CONV), act(FUSED, 0.05)]
    assert judge(lib_plus_own, OWN, None, PARTIAL).ok  # reference unknown: the launch rule is not applied
    assert judge([], OWN, 0, STRICT).reasons == ["none of your own kernels ran"]


def test_judge_accepts_extension_listings():
    """(An unknown policy never reaches judge: EvalSettings refuses it, test_eval_modes.py.)"""
    listing = ExtensionKernels("/x.so", ("_Z6fusedkPKfPf",), 1, 0)
    assert judge([act(FUSED, 1.0)], [listing], 1, STRICT).ok
    assert judge([act(FUSED, 1.0)], OwnKernels(OWN), 1, STRICT).ok


def test_result_round_trip_table_and_feedback():
    rows = [act(f"k{i}(float*)", 0.1 * (i + 1)) for i in range(6)] + [act(FILL, 0.05, context=("aten::zeros",))]
    result = judge(rows, [f"_Z2k{i}Pf" for i in range(6)], 3, STRICT)
    assert result.ok and result.message == ""
    again = ProvenanceResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    lines = result.table.splitlines()
    assert lines[0].startswith("GPU time of one forward call by kernel (top 5 of 7")
    assert len(lines) == 7 and lines[1].split()[-1] == "k5" and "own" in lines[1]
    assert lines[-1].startswith(f"Own kernels: {2.1 / 2.15 * 100:.1f}% of the GPU time")
    assert "torch/fill" in kernel_table(result.kernels, result.total_ms, limit=10)
    feedback = profile_feedback(result, sol_fraction=0.42)
    assert result.table in feedback and "42.0% of this GPU's speed of light" in feedback
    record = result.verdict_record()
    assert record.own_share == result.own_share and record.summary == result.summary and record.ok == result.ok
    assert record.kernels and set(record.kernels[0]) >= {"name", "origin", "calls", "ms", "share"}


def test_package_imports_without_torch():
    code = ("import sys; import kevin_agent.evaluate.provenance as p; import kevin_agent.evaluate.provenance.profile; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.stdout.strip() == "ok", done.stderr


def test_profile_forward_glue_with_a_fake_profiler(tmp_path):
    """profile_forward's plumbing (range, export, parse) without torch: the profiler is faked."""
    from contextlib import contextmanager

    from kevin_agent.evaluate.provenance.profile import ProfilerHandles, profile_forward

    raw = (FIXTURES / "handmade" / "raw_conv_epilogue.chrome.json").read_text()
    calls: list[str] = []

    class FakeProfile:
        def __init__(self, **kwargs):
            calls.append("profile:" + ",".join(sorted(str(a) for a in kwargs["activities"])))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def export_chrome_trace(self, path):
            Path(path).write_text(raw)

    @contextmanager
    def record_function(name):
        calls.append(f"range:{name}")
        yield

    @contextmanager
    def no_grad():
        yield

    class Activity:
        CPU, CUDA = "CPU", "CUDA"

    handles = ProfilerHandles(FakeProfile, Activity, record_function, lambda device=None: calls.append("sync"), no_grad)
    acts = profile_forward(lambda x: calls.append(f"forward:{x}"), (7,), None, handles,
                           raw_trace_path=tmp_path / "raw.json", padding=0)
    assert calls == ["sync", "profile:CPU,CUDA", f"range:{FORWARD_ANNOTATION}", "forward:7", "sync"]
    assert (tmp_path / "raw.json").is_file() and launch_count(acts) == 6
    calls.clear()
    profile_forward(lambda x: None, (7,), None, handles, padding=3)  # throwaway kernels, then a sync, first
    assert calls == ["sync", "profile:CPU,CUDA", "sync", f"range:{FORWARD_ANNOTATION}", "sync"]


def test_a_kernel_launch_without_its_kernel_record_makes_the_profile_incomplete(tmp_path):
    from kevin_agent.evaluate.provenance.profile import IncompleteProfile, ProfilerHandles, profile_forward
    from kevin_agent.evaluate.provenance.trace import unrecorded_launches

    raw = json.loads((FIXTURES / "handmade" / "raw_conv_epilogue.chrome.json").read_text())
    assert unrecorded_launches(raw) == 0
    lost = {"traceEvents": [e for e in raw["traceEvents"]
                            if not (e.get("cat") == "kernel" and (e.get("args") or {}).get("correlation") == 11)]}
    assert unrecorded_launches(lost) == 1  # the cuDNN kernel's record is gone, its launch is not
    head = {"traceEvents": [e for e in raw["traceEvents"]
                            if not (e.get("cat") == "kernel" and (e.get("args") or {}).get("correlation") == 1)]}
    assert unrecorded_launches(head) == 0  # a lost record before the forward range does not matter

    class Lossy:
        def __init__(self, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def export_chrome_trace(self, path):
            Path(path).write_text(json.dumps(lost))

    from contextlib import nullcontext

    handles = ProfilerHandles(Lossy, type("A", (), {"CPU": 1, "CUDA": 2}), lambda name: nullcontext(),
                              lambda device=None: None, nullcontext)
    with pytest.raises(IncompleteProfile, match="1 kernel launch of the forward call"):
        profile_forward(lambda: None, (), None, handles, padding=0)


def test_profile_forward_with_the_real_profiler_on_cpu(tmp_path):
    """The real torch.profiler path on a machine without a GPU: the range and CPU ops are exported in the
    categories the parser reads, and no GPU work means no activities."""
    torch = pytest.importorskip("torch")
    from kevin_agent.evaluate.provenance.profile import ProfilerHandles, capture_handles, profile_forward

    real = capture_handles()
    handles = ProfilerHandles(real.profile, real.activity, real.record_function, lambda device=None: None, real.no_grad)
    x = torch.randn(16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available, disabling CUDA profiling"
        acts = profile_forward(lambda a: torch.relu(a @ a), (x,), None, handles, raw_trace_path=tmp_path / "raw.json")
    events = json.loads((tmp_path / "raw.json").read_text())["traceEvents"]
    seen = {(e.get("cat"), e.get("name")) for e in events if e.get("ph") == "X"}
    assert ("user_annotation", FORWARD_ANNOTATION) in seen and ("cpu_op", "aten::mm") in seen
    assert acts == [] or torch.cuda.is_available()


def test_launch_context_falls_back_to_the_external_id():
    """A launch recorded on a thread without CPU spans still finds its op through Kineto's External id."""
    raw = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": FORWARD_ANNOTATION, "pid": 1, "tid": 1, "ts": 0, "dur": 100,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
         "args": {"External id": 2}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "pid": 1, "tid": 99, "ts": 15, "dur": 2,
         "args": {"External id": 2, "correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_64x8_1x2", "pid": 0, "tid": 7, "ts": 40, "dur": 5.0,
         "args": {"correlation": 7}},
    ]}
    (only,) = activities_from_chrome_trace(raw)
    assert only.context == ("aten::mm",) and only.api == "cuLaunchKernelEx"
