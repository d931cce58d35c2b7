import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Fused tail after the convolution: out = (min(x, c) + bias[channel]) * scale
cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>

#define CHECK_INPUT(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__global__ void min_add_mul_kernel(const float* __restrict__ in, const float* __restrict__ bias,
                                   float* __restrict__ out, int64_t n, int64_t channels, int64_t hw,
                                   float cval, float scale) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t c = (i / hw) % channels;
        float v = in[i];
        v = v < cval ? v : cval;          // torch.min(x, constant)
        out[i] = (v + bias[c]) * scale;   // + bias, * scaling_factor
    }
}

torch::Tensor min_add_mul_cuda(torch::Tensor x, torch::Tensor bias, double cval, double scale) {
    CHECK_INPUT(x);
    CHECK_INPUT(bias);
    TORCH_CHECK(x.dim() >= 2, "x must be at least 2-D (N, C, ...)");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    int64_t channels = xc.size(1);
    TORCH_CHECK(bc.numel() == channels, "bias must have one value per channel");
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return out;
    int64_t hw = n / (xc.size(0) * channels);
    const int threads = 256;
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65536);
    min_add_mul_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n, channels, hw,
        (float)cval, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor min_add_mul_cuda(torch::Tensor x, torch::Tensor bias, double cval, double scale);"

min_add_mul = load_inline(
    name="kb_l2_31_min_add_mul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["min_add_mul_cuda"],
)


class ModelNew(nn.Module):
    """Convolution in PyTorch, then one fused custom kernel for min(constant) + bias, * scale."""

    def __init__(self, in_channels, out_channels, kernel_size, constant_value, bias_shape, scaling_factor):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.constant_value = constant_value
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv(x)
        return min_add_mul.min_add_mul_cuda(x, self.bias, float(self.constant_value), float(self.scaling_factor))
