import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# torch.log_softmax(x, dim=self.dim): one block per line along dim, block reductions for the
# max and the sum of exps, out = x - max - log(sum).
source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <math.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_FLOAT(x) TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x); CHECK_FLOAT(x)

constexpr int THREADS = 512;  // multiple of 32

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Block-wide max / sum; the result is valid in every thread. `shared` holds >= 32 floats.
__device__ float block_max(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int num_warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < num_warps) ? shared[threadIdx.x] : -INFINITY;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

__device__ float block_sum(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int num_warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < num_warps) ? shared[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    v = shared[0];
    __syncthreads();
    return v;
}

// The input is viewed as (outer, D, inner) with the reduced dim in the middle; one block
// handles one (outer, inner) line of D elements spaced `inner` apart (inner == 1: a contiguous row).
// LOG: log_softmax = x - max - log(sum exp(x - max)); else softmax = exp(x - max) / sum.
template <bool LOG>
__global__ void __launch_bounds__(THREADS) softmax_kernel(
        const float* __restrict__ in, float* __restrict__ out, int64_t D, int64_t inner) {
    __shared__ float shared[32];
    const int64_t line = blockIdx.x;
    const int64_t o = line / inner, i = line % inner;
    const int64_t base = o * D * inner + i;
    const float* x = in + base;
    float* y = out + base;

    float m = -INFINITY;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) m = fmaxf(m, x[d * inner]);
    m = block_max(m, shared);

    float s = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += expf(x[d * inner] - m);
    s = block_sum(s, shared);

    if (LOG) {
        const float shift = m + logf(s);
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) y[d * inner] = x[d * inner] - shift;
    } else {
        const float inv = 1.0f / s;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) y[d * inner] = expf(x[d * inner] - m) * inv;
    }
}

template <bool LOG>
static torch::Tensor softmax_launch(torch::Tensor x, int64_t dim) {
    CHECK_INPUT(x);
    const int64_t nd = x.dim();
    TORCH_CHECK(nd >= 1, "input must have at least one dimension");
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < dim; ++k) outer *= x.size(k);
    for (int64_t k = dim + 1; k < nd; ++k) inner *= x.size(k);
    const int64_t D = x.size(dim);
    auto out = torch::empty_like(x);
    const int64_t lines = outer * inner;
    if (lines == 0 || D == 0) return out;
    TORCH_CHECK(lines < ((int64_t)1 << 31), "too many rows for the grid");
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    softmax_kernel<LOG><<<(unsigned int)lines, THREADS, 0, stream>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), D, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

torch::Tensor log_softmax_cuda(torch::Tensor x, int64_t dim) {
    return softmax_launch<true>(x, dim);
}
"""

cpp_src = "torch::Tensor log_softmax_cuda(torch::Tensor x, int64_t dim);"

log_softmax_ext = load_inline(
    name="kb_l1_24_log_softmax",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["log_softmax_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim
        self.ext = log_softmax_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.log_softmax_cuda(x.contiguous(), int(self.dim))
