import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Sum over one dimension (keepdim=True): x is viewed as (outer, R, inner); one thread per output
# (outer, inner) position loops over the R reduced entries (coalesced across the inner index).
source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <vector>

#define CHECK_INPUT(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.is_contiguous(), #x " must be contiguous"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__global__ void sum_dim_kernel(const float* __restrict__ x, float* __restrict__ out,
                               int64_t outer, int64_t R, int64_t inner) {
    int64_t total = outer * inner;
    int64_t stride = (int64_t)blockDim.x * gridDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < total; p += stride) {
        int64_t o = p / inner;
        int64_t s = p - o * inner;
        const float* xp = x + o * R * inner + s;
        float acc = 0.0f;
        for (int64_t r = 0; r < R; ++r) acc += xp[r * inner];
        out[p] = acc;
    }
}

torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim) {
    CHECK_INPUT(x);
    int64_t nd = x.dim();
    TORCH_CHECK(nd >= 1, "x must have at least one dim");
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < nd; ++d) inner *= x.size(d);
    int64_t R = x.size(dim);
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes[dim] = 1;  // keepdim=True
    auto out = torch::empty(sizes, x.options());
    int64_t total = outer * inner;
    if (total == 0) return out;
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    sum_dim_kernel<<<(unsigned int)blocks, threads>>>(x.data_ptr<float>(), out.data_ptr<float>(), outer, R, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = "torch::Tensor sum_dim_cuda(torch::Tensor x, int64_t dim);"

sum_dim_ext = load_inline(
    name="kb_l1_47_sum_dim",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["sum_dim_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim
        self.ext = sum_dim_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.sum_dim_cuda(x.contiguous(), int(self.dim))
