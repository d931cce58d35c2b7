import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# demo answer t1.1 (fused, float4)

bias_gelu_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_tanh(float v) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

// Four elements per thread with 16-byte loads and stores; bias broadcast over the last dimension.
__global__ void bias_gelu_scale_vec4(const float4* __restrict__ x, const float4* __restrict__ bias,
                                     float4* __restrict__ y, float scale, int64_t n4, int64_t hidden4) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n4; i += stride) {
        float4 v = x[i];
        float4 b = __ldg(&bias[i % hidden4]);
        float4 r;
        r.x = gelu_tanh(v.x + b.x) * scale;
        r.y = gelu_tanh(v.y + b.y) * scale;
        r.z = gelu_tanh(v.z + b.z) * scale;
        r.w = gelu_tanh(v.w + b.w) * scale;
        y[i] = r;
    }
}

// Any shape: one element per thread (when the last dimension is not a multiple of 4, or unaligned).
__global__ void bias_gelu_scale_scalar(const float* __restrict__ x, const float* __restrict__ bias,
                                       float* __restrict__ y, float scale, int64_t n, int64_t hidden) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        y[i] = gelu_tanh(x[i] + bias[i % hidden]) * scale;
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
    int64_t n = xc.numel();
    int64_t hidden = bc.numel();
    if (n == 0) {
        return y;
    }
    const int threads = 256;
    bool aligned = reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(bc.data_ptr<float>()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0;
    if (hidden % 4 == 0 && aligned) {
        int64_t n4 = n / 4;
        int64_t blocks = (n4 + threads - 1) / threads;
        if (blocks > 65535 * 8) {
            blocks = 65535 * 8;
        }
        bias_gelu_scale_vec4<<<(unsigned int)blocks, threads>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()),
            reinterpret_cast<const float4*>(bc.data_ptr<float>()),
            reinterpret_cast<float4*>(y.data_ptr<float>()), (float)scale, n4, hidden / 4);
    } else {
        int64_t blocks = (n + threads - 1) / threads;
        if (blocks > 65535 * 8) {
            blocks = 65535 * 8;
        }
        bias_gelu_scale_scalar<<<(unsigned int)blocks, threads>>>(
            xc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), (float)scale, n, hidden);
    }
    return y;
}
"""

bias_gelu_cpp_source = "torch::Tensor bias_gelu_scale(torch::Tensor x, torch::Tensor bias, double scale);"

bias_gelu = load_inline(
    name="example_bias_gelu_vec4",
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
