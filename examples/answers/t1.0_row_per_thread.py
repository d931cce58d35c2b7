import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# demo answer t1.0 (one thread per row)

bias_gelu_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

// One thread per row, walking along it: neighbouring threads touch addresses a whole row
// apart, so no load is coalesced and only `rows` threads run.
__global__ void bias_gelu_scale_rows(const float* __restrict__ x, const float* __restrict__ bias,
                                     float* __restrict__ y, float scale, int64_t rows, int64_t hidden) {
    int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) {
        return;
    }
    const float* in = x + row * hidden;
    float* out = y + row * hidden;
    for (int64_t c = 0; c < hidden; ++c) {
        out[c] = gelu_tanh(in[c] + bias[c]) * scale;
    }
}

torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "inputs must be float32");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    TORCH_CHECK(xc.dim() >= 1 && xc.size(-1) == bc.numel(), "bias must match the last dimension");
    auto y = torch::empty_like(xc);
    int64_t hidden = bc.numel();
    int64_t rows = hidden == 0 ? 0 : xc.numel() / hidden;
    if (rows == 0) {
        return y;
    }
    const int threads = 128;
    int64_t blocks = (rows + threads - 1) / threads;
    bias_gelu_scale_rows<<<(unsigned int)blocks, threads>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), (float)scale, rows, hidden);
    return y;
}
"""

bias_gelu_cpp_source = "torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor bias, double scale);"

bias_gelu = load_inline(
    name="example_bias_gelu_rows",
    cpp_sources=bias_gelu_cpp_source,
    cuda_sources=bias_gelu_source,
    functions=["bias_gelu_scale"],
    verbose=False,
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.02)
        self.scale = scale
        self.ext = bias_gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.bias_gelu_scale(x, self.bias, self.scale)
