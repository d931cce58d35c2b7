"""What a profiled GPU kernel name says about where the kernel came from. Plain tables + parsing.

Profiler names are demangled C++ (``void at::native::vectorized_elementwise_kernel<4, ...>(int,
...)``), plain C names (``nvjet_tst_128x64_64x8_1x2_h_bz_coopB_TNT``, ``triton_poi_fused_add_0``)
or, for memory operations, ``Memcpy DtoD (Device -> Device)`` / ``Memset (Device)``.

* ``qualified_name`` strips the return type, template arguments and parameters:
  ``at::native::vectorized_elementwise_kernel``; ``(anonymous namespace)`` is kept as a scope.
* ``FAMILIES`` maps a qualified name to (origin, family). The first matching row wins, so the
  cuDNN rows come before the cuBLAS rows (``sm90_xmma_fprop_*`` is cuDNN, ``sm90_xmma_gemm_*``
  cuBLAS). Patterns are anchored at the start of the qualified name: a kernel of the candidate's
  that is merely *called* ``elementwise_kernel`` does not match ``at::native::elementwise_kernel``.
* ``ROLES`` says which PyTorch kernels are *fills* (write values that do not depend on the
  inputs: constants, index ranges, random numbers; also host-to-device uploads, see ``role_of``)
  or *copies* (move or cast data without arithmetic). Every other foreign kernel is *compute*.
  ``torch.cat`` (``CatArrayBatchedCopy``) is compute: concatenation is an operator of the module,
  not an allocation or layout fix-up.
"""

from __future__ import annotations

import re

OWN, LIBRARY, TORCH, GENERATED, OTHER = "own", "library", "torch", "generated", "other"
ORIGINS = (OWN, LIBRARY, TORCH, GENERATED, OTHER)
COMPUTE, FILL, COPY = "compute", "fill", "copy"
ANON = "(anonymous namespace)"
_ARCH = r"(?:sm\d+|ampere|volta|turing|maxwell|pascal|kepler|hopper|ada|blackwell)"

# (origin, family, pattern on the qualified name); first match wins.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    # generated code: Triton (inductor, user kernels named like inductor's), nvFuser
    (GENERATED, "Triton (inductor)", r"triton_"),
    (GENERATED, "nvFuser", r"(?:nvfuser_|CudaCodeGen::)"),
    # PyTorch's own kernels (ATen, c10, its private copy of CUB, attention kernels built into ATen)
    (TORCH, "PyTorch ATen", r"(?:at|c10|at_cuda_detail|caffe2)::"),
    (TORCH, "PyTorch ATen", r"\(anonymous namespace\)::(?:elementwise_kernel_with_index|"
                            r"indexing_backward_kernel|sum_and_scatter|compute_grad_weight)"),
    (TORCH, "PyTorch attention (FlashAttention)", r"pytorch_flash::"),
    (TORCH, "PyTorch attention (memory-efficient)", r"(?:fmha_cutlass|PyTorchMemEffAttention)"),
    (TORCH, "PyTorch (legacy THC/THCUNN)", r"(?:cunn_|kernelPointwiseApply|THCuda|kernelReduce)"),
    # cuDNN (before cuBLAS: its xmma kernels share the sm90_xmma_ prefix)
    (LIBRARY, "cuDNN", r"(?:cudnn|xmma_cudnn|cutlass_cudnn|cask_cudnn|cask_plugin_cudnn)"),
    (LIBRARY, "cuDNN", _ARCH + r"_\w*?(?:fprop|dgrad|wgrad|conv|scudnn|hcudnn|cudnn)"),
    (LIBRARY, "cuDNN", r"(?:implicit_convolve_|explicit_convolve_|precomputed_convolve_|conv2d_grouped_direct_kernel|"
                       r"conv_generic|fft2d_|fft1d_|flip_filter|im2col4d_kernel|nchwToNhwcKernel|nhwcToNchwKernel|"
                       r"nchwToFoldedNhwcKernel|foldedNhwcToNchwKernel|winograd|generateWinograd|scalePackedTensor_kernel|"
                       r"tensorTransformGeneric|bn_fw_|bn_bw_|pooling_fw_|pooling_bw_|softmax_fw_kernel|dgrad_engine|"
                       r"wgrad_alg\d|dgrad2d_|compute_gemm_pointers|op_generic_tensor_kernel|kern_precompute_indices|"
                       r"fermiPlusCgemm|transpose_readWrite_alignment_kernel|cask::|fusedConv)"),
    # cuBLAS / cuBLASLt (including the CUTLASS-built kernels cuBLAS ships)
    (LIBRARY, "cuBLAS", r"(?:nvjet_|cublas|cublasLt::|xmma_gemm|gemmSN_|gemmk1_kernel|gemmSmall|"
                        r"gemv2[NT]_kernel|gemvNSP_kernel|gemv_kernel|splitKreduce_kernel|"
                        r"batched_gemm|reduce_1Block_kernel|dot_kernel|scal_kernel|axpy_kernel|"
                        r"asum_kernel|nrm2_kernel|trsv_|trsm_|syrk_|herk_|geam_kernel|"
                        r"cutlass_80_|cutlass_90_|cutlass_75_|cutlass_70_)"),
    (LIBRARY, "cuBLAS", _ARCH + r"_\w*?(?:gemm|gemv|sgemm|hgemm|dgemm|cgemm|zgemm|igemm|"
                                r"i8816|h1688|s1688|h16816|s16816|hmma|imma)"),
    (LIBRARY, "CUTLASS", r"(?:cutlass|cute)(?:::|_)"),
    # other CUDA libraries
    (LIBRARY, "cuFFT", r"(?:cufft|regular_fft|vector_fft|composite_2way_fft|sp(?:Radix|Vector)\d|dpRadix|"
                       r"dp(?:Vector)\d|(?:pre|post)process(?:C2C|R2C|C2R)|fft_(?:r2c|c2r|c2c)|bluestein)"),
    (LIBRARY, "NCCL", r"nccl"),
    (LIBRARY, "cuSPARSE", r"(?:cusparse|csrmv|csrMv|spmv_|spmm_|SpMM|SpMV)"),
    (LIBRARY, "cuRAND", r"(?:curand|generate_seed_pseudo|gen_sequenced)"),
    (LIBRARY, "cuSOLVER", r"cusolver"),
    (LIBRARY, "cuTENSOR", r"cutensor"),
    (LIBRARY, "FlashAttention", r"flash::"),
    (LIBRARY, "CUB/Thrust", r"(?:cub|thrust)::"),
)
_FAMILIES = tuple((origin, family, re.compile(pattern)) for origin, family, pattern in FAMILIES)

# Namespaces of kernels that land in a candidate's own extension without being written there: a
# library's device-wide algorithm it calls (cub::DeviceReduce, thrust::sort, a CUTLASS GEMM), or
# ATen's kernel templates instantiated through internal headers (at::native::gpu_kernel).
BUNDLED_NAMESPACES: tuple[tuple[str, str, str], ...] = (
    ("cub::", LIBRARY, "CUB/Thrust (compiled into your extension)"),
    ("thrust::", LIBRARY, "CUB/Thrust (compiled into your extension)"),
    ("cutlass::", LIBRARY, "CUTLASS (compiled into your extension)"),
    ("cute::", LIBRARY, "CUTLASS (compiled into your extension)"),
    ("at::", TORCH, "PyTorch ATen templates (compiled into your extension)"),
    ("c10::", TORCH, "PyTorch ATen templates (compiled into your extension)"),
)

# Roles of PyTorch kernels, matched anywhere in the full (demangled) name.
ROLES: tuple[tuple[str, str], ...] = (
    (FILL, r"FillFunctor|\bfill_kernel|fill_kernel_cuda|\bzero_kernel|elementwise_kernel_with_index|"
           r"distribution_elementwise_grid_stride_kernel|distribution_nullary_kernel|"
           r"(?:uniform|normal|random|bernoulli|exponential)_(?:kernel|and_transform)|arange_cuda|linspace_cuda|range_cuda"),
    (COPY, r"copy_kernel_cuda|\bcopy_kernel|copy_device_to_device|"
           r"CopyFunctor|contiguous_kernel|\bclone_kernel"),
)
_ROLES = tuple((role, re.compile(pattern)) for role, pattern in ROLES)

# Launch context: CPU-side torch ops or annotations enclosing the launch (from the profiler trace).
COMPILED_REGION_MARKS = ("Torch-Compiled Region", "CompiledFxGraph", "Compiled Function", "## Call CompiledFxGraph",
                         "TorchDynamo Cache Lookup", "triton_", "inductor_")
ATEN_LIBRARY_OPS: tuple[tuple[str, str], ...] = (
    (r"aten::(?:cudnn_|miopen_|_?convolution|conv\w*|_cudnn_|cudnn_batch_norm|_cudnn_rnn)", "cuDNN"),
    (r"aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation|addmv|mv|dot|vdot|_scaled_mm|"
     r"_int_mm|einsum|tensordot|addbmm|linalg_vecdot|_linalg_\w+|chain_matmul|linalg_matmul)$", "cuBLAS"),
    (r"aten::(?:_fft_\w+|fft_\w+|stft|istft)", "cuFFT"),
)
_ATEN_LIBRARY_OPS = tuple((re.compile(p), family) for p, family in ATEN_LIBRARY_OPS)

MEMCPY_PREFIX, MEMSET_PREFIX = "Memcpy", "Memset"


def qualified_name(name: str) -> str:
    """Namespaces and name of a profiled kernel, without return type, template args or parameters.

    ``void at::native::vectorized_elementwise_kernel<4, F, A>(int, F, A)`` ->
    ``at::native::vectorized_elementwise_kernel``; ``(anonymous namespace)::k(float*)`` ->
    ``(anonymous namespace)::k``; a plain C name is returned unchanged; a mangled name is parsed.
    """
    name = name.strip()
    if name.startswith("_Z"):
        return mangled_qualified_name(name) or name
    if name.startswith((MEMCPY_PREFIX, MEMSET_PREFIX)):
        return name
    text = name.replace(ANON, "\0")
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("operator", i) and depth == 0:  # operator()/operator< are part of a name
            match = re.match(r"operator\s*(\(\)|\[\]|<<=?|>>=?|<=|>=|<|>|[^\s(<]+)", text[i:])
            if match:
                out.append(match.group(0))
                i += len(match.group(0))
                continue
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    flat = "".join(out).strip()
    flat = flat.split(" const")[0] if flat.endswith(" const") else flat
    last = flat.split()[-1] if flat.split() else flat
    return last.replace("\0", ANON)


def base_name(name: str) -> str:
    """The last component of the qualified name (``at::native::reduce_kernel`` -> ``reduce_kernel``)."""
    return qualified_name(name).split("::")[-1]


def mangled_qualified_name(mangled: str) -> str | None:
    """``_ZN2my3ops6kernelEPf`` -> ``my::ops::kernel`` (source names only; None if not understood)."""
    body = mangled[2:]
    if body.startswith("L"):
        body = body[1:]
    parts: list[str] = []
    nested = body.startswith("N")
    pos = 1 if nested else 0
    while pos < len(body):
        while pos < len(body) and body[pos] in "rVKL":  # cv-qualifiers of nested names, local marker
            pos += 1
        match = re.match(r"\d+", body[pos:])
        if not match:
            break
        length = int(match.group(0))
        pos += len(match.group(0))
        ident = body[pos: pos + length]
        if len(ident) != length:
            return None
        parts.append(ANON if ident.startswith("_GLOBAL__N") else ident)
        pos += length
        if not nested or pos >= len(body) or body[pos] in "EI":
            break
    return "::".join(parts) or None


def family_of(name: str) -> tuple[str, str] | None:
    """(origin, family) that a kernel's name claims, or None for a name no table knows."""
    qualified = qualified_name(name)
    for origin, family, pattern in _FAMILIES:
        if pattern.match(qualified):
            return origin, family
    return None


def bundled_origin(name: str) -> tuple[str, str] | None:
    """(origin, family) when a kernel of the candidate's extension is library or ATen template code."""
    qualified = qualified_name(name)
    for prefix, origin, family in BUNDLED_NAMESPACES:
        if qualified.startswith(prefix):
            return origin, family
    return None


def role_of(name: str, kind: str = "kernel") -> str:
    """compute / fill / copy for a foreign GPU activity."""
    if kind == "memset" or name.startswith(MEMSET_PREFIX):
        return FILL
    if kind == "memcpy" or name.startswith(MEMCPY_PREFIX):
        # an upload from the host carries no input-dependent work: the inputs live on the device,
        # so host data that depends on them needs a device-to-host copy first, which stays a copy
        return FILL if "HtoD" in name else COPY
    for role, pattern in _ROLES:
        if pattern.search(name):
            return role
    return COMPUTE


def is_compiled_region(context: str) -> bool:
    return any(mark in context for mark in COMPILED_REGION_MARKS)


def library_for_aten_op(op: str) -> str | None:
    """The vendor library a torch op hands its work to (aten::mm -> cuBLAS), or None."""
    for pattern, family in _ATEN_LIBRARY_OPS:
        if pattern.match(op):
            return family
    return None


def short_name(name: str, limit: int = 90) -> str:
    """A display form: no ``void``, no parameter list, cut to ``limit`` characters."""
    text = name.strip()
    if text.startswith((MEMCPY_PREFIX, MEMSET_PREFIX)):
        return text[:limit]
    if text.startswith("void "):
        text = text[5:]
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and not text.startswith(ANON, i) and i > 0:
            cut = i
            break
    text = text[:cut]
    return text if len(text) <= limit else text[: limit - 3] + "..."
