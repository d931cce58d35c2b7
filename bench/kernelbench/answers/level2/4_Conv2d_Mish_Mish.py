import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Fused conv2d (direct convolution, groups=1) + Mish + Mish: one thread per output element.
# mish(x) = x * tanh(softplus(x)), softplus(x) = log1p(exp(x)) (x itself above 20, where the
# two agree in float).
source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>

#define CHECK_INPUT(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor"); \\
    TORCH_CHECK(x.is_contiguous(), #x " must be contiguous"); \\
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, #x " must be float32")

__device__ __forceinline__ float mish_f(float v) {
    float sp = v > 20.0f ? v : log1pf(expf(v));
    return v * tanhf(sp);
}

__global__ void conv_mish_mish_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ conv_b, float* __restrict__ out,
                                      int N, int Cin, int H, int W, int Cout, int KH, int KW,
                                      int OH, int OW, int stride, int pad, int dil) {
    int64_t total = (int64_t)N * Cout * OH * OW;
    int64_t step = (int64_t)blockDim.x * gridDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
        int ow = (int)(idx % OW);
        int oh = (int)((idx / OW) % OH);
        int co = (int)((idx / ((int64_t)OW * OH)) % Cout);
        int n = (int)(idx / ((int64_t)OW * OH * Cout));
        float acc = conv_b[co];
        for (int ci = 0; ci < Cin; ++ci) {
            const float* xp = x + ((int64_t)n * Cin + ci) * H * W;
            const float* wp = w + ((int64_t)co * Cin + ci) * KH * KW;
            for (int kh = 0; kh < KH; ++kh) {
                int ih = oh * stride - pad + kh * dil;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    int iw = ow * stride - pad + kw * dil;
                    if (iw < 0 || iw >= W) continue;
                    acc += xp[(int64_t)ih * W + iw] * wp[kh * KW + kw];
                }
            }
        }
        out[idx] = mish_f(mish_f(acc));
    }
}

torch::Tensor conv_mish_mish_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b,
                                  int64_t stride, int64_t pad, int64_t dil) {
    CHECK_INPUT(x); CHECK_INPUT(w); CHECK_INPUT(conv_b);
    TORCH_CHECK(x.dim() == 4 && w.dim() == 4, "expected 4-d input and weight");
    int N = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3);
    int Cout = w.size(0), KH = w.size(2), KW = w.size(3);
    TORCH_CHECK(w.size(1) == Cin, "weight/input channel mismatch (groups must be 1)");
    TORCH_CHECK(conv_b.numel() == Cout, "bias size mismatch");
    int OH = (H + 2 * (int)pad - (int)dil * (KH - 1) - 1) / (int)stride + 1;
    int OW = (W + 2 * (int)pad - (int)dil * (KW - 1) - 1) / (int)stride + 1;
    TORCH_CHECK(OH > 0 && OW > 0, "output would be empty");
    auto out = torch::empty({N, Cout, OH, OW}, x.options());
    int64_t total = (int64_t)N * Cout * OH * OW;
    if (total == 0) return out;
    const int threads = 256;
    int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    conv_mish_mish_kernel<<<(unsigned int)blocks, threads>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), conv_b.data_ptr<float>(), out.data_ptr<float>(),
        N, Cin, H, W, Cout, KH, KW, OH, OW, (int)stride, (int)pad, (int)dil);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = ("torch::Tensor conv_mish_mish_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor conv_b, "
           "int64_t stride, int64_t pad, int64_t dil);")

conv_mish_mish_ext = load_inline(
    name="kb_l2_4_conv_mish_mish",
    cpp_sources=cpp_src,
    cuda_sources=source,
    functions=["conv_mish_mish_cuda"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.ext = conv_mish_mish_ext

    def forward(self, x):
        return self.ext.conv_mish_mish_cuda(
            x.contiguous(), self.conv.weight.contiguous(), self.conv.bias.contiguous(),
            int(self.conv.stride[0]), int(self.conv.padding[0]), int(self.conv.dilation[0]))
