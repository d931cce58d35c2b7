import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# demo answer t0.0 (compile error)

bias_gelu_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

__global__ void bias_gelu_scale_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                       float* __restrict__ y, float scale, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        y[i] = gelu_tanh(x[i] + bias[i % hidden]) * scale;
    }
}

torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "inputs must be CUDA tensors");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    bias_gelu_scale_kernel<<<(unsigned int)blocks, threads>>>(
        xc.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), (float)scale, n);
    return y;
}
"""

bias_gelu_cpp_source = "torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor bias, double scale);"

bias_gelu = load_inline(
    name="example_bias_gelu_v0",
    cpp_sources=bias_gelu_cpp_source,
    cuda_sources=bias_gelu_source,
    functions=["bias_gelu_scale"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.02)
        self.scale = scale
        self.ext = bias_gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.bias_gelu_scale(x, self.bias, self.scale)
