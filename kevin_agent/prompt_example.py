"""The one-shot example shown in turn 0: an element-wise addition and its CUDA replacement."""

from __future__ import annotations

EXAMPLE_MODEL = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs():
    a = torch.randn(4096, 1024, device="cuda")
    b = torch.randn(4096, 1024, device="cuda")
    return [a, b]


def get_init_inputs():
    return []
'''

EXAMPLE_MODEL_NEW = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    int64_t n = a_c.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    add_kernel<<<blocks, threads>>>(a_c.data_ptr<float>(), b_c.data_ptr<float>(),
                                    out.data_ptr<float>(), n);
    return out;
}
"""

add_cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_extension = load_inline(
    name="elementwise_add",
    cpp_sources=add_cpp_source,
    cuda_sources=add_cuda_source,
    functions=["add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add = add_extension

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.add.add_cuda(a, b)
'''
