"""y = x @ w.T with both operands in NVFP4: quantize, multiply, compare.

Runs on the CPU or, where there is one, the GPU: python examples/quickstart.py
"""

import torch

import nvfp4_kernels as nk

device = "cuda" if torch.cuda.is_available() and nk.WITH_CUDA else "cpu"
torch.manual_seed(0)
x = torch.randn(64, 4096, dtype=torch.bfloat16, device=device)  # activations [M, K]
w = torch.randn(1024, 4096, dtype=torch.bfloat16, device=device)  # weights [N, K], as nn.Linear holds them

# A global scale per tensor maps its largest magnitude onto the largest NVFP4 value
# with the largest block scale: 6 (e2m1) x 448 (e4m3) = 2688. Without it, the block
# scales of small values fall below e4m3's smallest subnormal (2^-9) and quantize to 0.
gx = 2688.0 / x.abs().amax().float()
gw = 2688.0 / w.abs().amax().float()
xq, sx = nk.quantize(x, global_scale=gx)  # codes [64, 2048] (two 4-bit values a byte), scales [64, 256] e4m3
wq, sw = nk.quantize(w, global_scale=gw)

# The gemm multiplies the codes and scales exactly and sums in fp32; alpha undoes the global scales.
y = nk.gemm(xq, wq, sx, sw, alpha=1.0 / (gx * gw))  # [64, 1024] fp16

ref = x.float() @ w.float().T
err = ((y.float() - ref).norm() / ref.norm()).item()
print(f"kernel: {nk.kernel_name('gemm', xq, wq, sx, sw)}; relative error against the bf16 product: {err:.3f}")
# e2m1 keeps 2 significant bits: expect ~0.13 relative error on normal random data. The kernel adds
# nothing to that: it equals nvfp4_kernels.reference.gemm, the exact product of the quantized operands.
exact = nk.reference.gemm(xq.cpu(), wq.cpu(), sx.cpu(), sw.cpu(), (1.0 / (gx * gw)).cpu())
assert torch.allclose(y.cpu().float(), exact.float(), rtol=1e-3, atol=1e-3)
