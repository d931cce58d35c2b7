import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# RMS over dim 1 of a (B, C, *) tensor: one thread per (b, spatial) position loops over the C
# channels (coalesced across the spatial index), then writes x / sqrt(mean(x^2) + eps).
source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>

#define CHECK_INPUT(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.is_contiguous(), #x " must be contiguous"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__global__ void rmsnorm_kernel(const float* __restrict__ x, float* __restrict__ out,
                               int64_t outer, int64_t C, int64_t inner, float eps) {
    int64_t total = outer * inner;
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += stride) {
        int64_t b = p / inner;
        int64_t s = p - b * inner;
        const float* xp = x + b * C * inner + s;
        float* op = out + b * C * inner + s;
        float acc = 0.0f;
        for (int64_t c = 0; c < C; ++c) {
            float v = xp[c * inner];
            acc += v * v;
        }
        float inv = rsqrtf(acc / (float)C + eps);
        for (int64_t c = 0; c < C; ++c) {
            op[c * inner] = xp[c * inner] * inv;
        }
    }
}

torch::Tensor rmsnorm_cuda(torch::Tensor x, double eps) {
    CHECK_INPUT(x);
    TORCH_CHECK(x.dim() >= 2, "x must have at least 2 dims");
    auto out = torch::empty_like(x);
    int64_t outer = x.size(0);
    int64_t C = x.size(1);
    int64_t inner = 1;
    for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
    int64_t total = outer * inner;
    if (total == 0 || C == 0) return out;
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    rmsnorm_kernel<<<(unsigned int)blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(),
                                                      outer, C, inner, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor rmsnorm_cuda(torch::Tensor x, double eps);"

rmsnorm_ext = load_inline(
    name="kb_l1_36_rmsnorm",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["rmsnorm_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps
        self.ext = rmsnorm_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.rmsnorm_cuda(x.contiguous(), float(self.eps))
