import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Fused bias add + ReLU for the hidden layers: out[r, c] = max(x[r, c] + bias[c], 0),
# where x = input @ weight^T comes from PyTorch's GEMM without bias.
cuda_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>

#define CHECK_INPUT(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__global__ void bias_relu_kernel(const float* __restrict__ in, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = in[i] + bias[i % cols];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias) {
    CHECK_INPUT(x);
    CHECK_INPUT(bias);
    TORCH_CHECK(x.dim() >= 1, "x must have a feature dimension");
    auto xc = x.contiguous();
    auto bc = bias.contiguous();
    int64_t cols = xc.size(xc.dim() - 1);
    TORCH_CHECK(bc.numel() == cols, "bias must have one value per output feature");
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65536);
    bias_relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor bias_relu_cuda(torch::Tensor x, torch::Tensor bias);"

bias_relu = load_inline(
    name="kb_l3_3_deep_narrow_mlp_bias_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias_relu_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_layer_sizes, output_size):
        """
        Same layers as Model (nn.Sequential of Linear, ReLU, ..., Linear); the bias add and ReLU of
        every hidden layer run in one custom CUDA kernel.
        """
        super(ModelNew, self).__init__()

        layers = []
        current_input_size = input_size

        for hidden_size in hidden_layer_sizes:
            layers.append(nn.Linear(current_input_size, hidden_size))
            layers.append(nn.ReLU())
            current_input_size = hidden_size

        layers.append(nn.Linear(current_input_size, output_size))

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        modules = list(self.network)
        # hidden layers: modules[0], modules[2], ... are Linear, each followed by a ReLU
        for linear in modules[0:-1:2]:
            x = bias_relu.bias_relu_cuda(F.linear(x, linear.weight), linear.bias)
        last = modules[-1]
        return F.linear(x, last.weight, last.bias)
