import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Fused tail after the linear layer: out = x * scale + x  (x * scaling_factor + original_x)
cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>

#define CHECK_INPUT(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__global__ void scale_residual_kernel(const float* __restrict__ in, float* __restrict__ out,
                                      int64_t n, float scale) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = in[i];
        out[i] = v * scale + v;
    }
}

torch::Tensor scale_residual_cuda(torch::Tensor x, double scale) {
    CHECK_INPUT(x);
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65536);
    scale_residual_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), n, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor scale_residual_cuda(torch::Tensor x, double scale);"

scale_residual = load_inline(
    name="kb_l2_40_scale_residual",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_residual_cuda"],
)


class ModelNew(nn.Module):
    """Linear layer in PyTorch, then one fused custom kernel for scaling + residual add."""

    def __init__(self, in_features, out_features, scaling_factor):
        super(ModelNew, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = F.linear(x, self.matmul.weight, self.matmul.bias)
        return scale_residual.scale_residual_cuda(x, float(self.scaling_factor))
