import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# LayerNorm over the trailing normalized_shape (N elements per row) in three kernels:
#   1) grid (chunks, rows): each block sums (x - K) and (x - K)^2 over one chunk of a row, where
#      K = the row's first element (a shift that keeps E[x^2] - E[x]^2 well conditioned),
#   2) one block per row adds the chunk partials in double and stores mean and 1/sqrt(var + eps),
#   3) elementwise y = (x - mean) * rstd * weight + bias.
source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>

#define CHECK_INPUT(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.is_contiguous(), #x " must be contiguous"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

constexpr int kThreads = 256;        // power of two
constexpr int64_t kChunk = 4096;     // elements per block in stage 1 (before capping the chunk count)
constexpr int64_t kMaxChunks = 1024;

__global__ void ln_partial_kernel(const float* __restrict__ x, float* __restrict__ partial,
                                  int64_t N, int64_t chunk_len, int64_t chunks) {
    __shared__ float s1[kThreads];
    __shared__ float s2[kThreads];
    int64_t row = blockIdx.y;
    int64_t chunk = blockIdx.x;
    const float* xr = x + row * N;
    float shift = xr[0];
    int64_t start = chunk * chunk_len;
    int64_t end = start + chunk_len;
    if (end > N) end = N;
    float a = 0.0f, b = 0.0f;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float v = xr[i] - shift;
        a += v;
        b += v * v;
    }
    s1[threadIdx.x] = a;
    s2[threadIdx.x] = b;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            s1[threadIdx.x] += s1[threadIdx.x + st];
            s2[threadIdx.x] += s2[threadIdx.x + st];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[(row * chunks + chunk) * 2 + 0] = s1[0];
        partial[(row * chunks + chunk) * 2 + 1] = s2[0];
    }
}

__global__ void ln_stats_kernel(const float* __restrict__ x, const float* __restrict__ partial,
                                float* __restrict__ stats, int64_t N, int64_t chunks, float eps) {
    __shared__ double s1[kThreads];
    __shared__ double s2[kThreads];
    int64_t row = blockIdx.x;
    double a = 0.0, b = 0.0;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
        a += (double)partial[(row * chunks + c) * 2 + 0];
        b += (double)partial[(row * chunks + c) * 2 + 1];
    }
    s1[threadIdx.x] = a;
    s2[threadIdx.x] = b;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            s1[threadIdx.x] += s1[threadIdx.x + st];
            s2[threadIdx.x] += s2[threadIdx.x + st];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double shift = (double)x[row * N];
        double m = s1[0] / (double)N;            // mean of the shifted values
        double var = s2[0] / (double)N - m * m;  // biased variance
        if (var < 0.0) var = 0.0;
        stats[row * 2 + 0] = (float)(shift + m);
        stats[row * 2 + 1] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

__global__ void ln_apply_kernel(const float* __restrict__ x, const float* __restrict__ stats,
                                const float* __restrict__ w, const float* __restrict__ bias,
                                float* __restrict__ out, int64_t N, int64_t total) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int64_t row = i / N;
        int64_t j = i - row * N;
        float mean = stats[row * 2 + 0];
        float rstd = stats[row * 2 + 1];
        out[i] = (x[i] - mean) * rstd * w[j] + bias[j];
    }
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    CHECK_INPUT(x); CHECK_INPUT(weight); CHECK_INPUT(bias);
    int64_t N = weight.numel();
    TORCH_CHECK(bias.numel() == N, "bias/weight size mismatch");
    TORCH_CHECK(N > 0 && x.numel() % N == 0, "x does not end with normalized_shape");
    auto out = torch::empty_like(x);
    int64_t total = x.numel();
    int64_t rows = total / N;
    if (rows == 0) return out;
    TORCH_CHECK(rows <= 65535, "too many rows for this kernel");
    int64_t chunks = (N + kChunk - 1) / kChunk;
    if (chunks > kMaxChunks) chunks = kMaxChunks;
    int64_t chunk_len = (N + chunks - 1) / chunks;
    auto partial = torch::empty({rows * chunks * 2}, x.options());
    auto stats = torch::empty({rows * 2}, x.options());
    dim3 grid1((unsigned int)chunks, (unsigned int)rows);
    ln_partial_kernel<<<grid1, kThreads>>>(x.data_ptr<float>(), partial.data_ptr<float>(), N, chunk_len, chunks);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    ln_stats_kernel<<<(unsigned int)rows, kThreads>>>(x.data_ptr<float>(), partial.data_ptr<float>(),
                                                      stats.data_ptr<float>(), N, chunks, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    int64_t blocks = (total + kThreads - 1) / kThreads;
    if (blocks > 65535) blocks = 65535;
    ln_apply_kernel<<<(unsigned int)blocks, kThreads>>>(x.data_ptr<float>(), stats.data_ptr<float>(),
                                                        weight.data_ptr<float>(), bias.data_ptr<float>(),
                                                        out.data_ptr<float>(), N, total);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

layernorm_ext = load_inline(
    name="kb_l1_40_layernorm",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["layernorm_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super(ModelNew, self).__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        self.ext = layernorm_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.layernorm_cuda(x.contiguous(), self.ln.weight.contiguous(),
                                       self.ln.bias.contiguous(), float(self.ln.eps))
