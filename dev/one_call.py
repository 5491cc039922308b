"""One nvfp4 call of a given shape, after a warm-up, for Nsight Compute:
    ncu --clock-control none -k regex:matmul_sm90 -s 2 -c 1 python dev/one_call.py M N K [dual] [w4a16|w4a4] [linear]
        [tile]
(w4a16: bf16 activations times the NVFP4 weights, gemm_w4a16 or dual_gemm_w4a16; w4a4: bf16 activations
quantized in the op, gemm_w4a4 or dual_gemm_w4a4, the global scale a tensor; linear: linear scale layouts, as
benchmarks.bench_models and checkpoints have them, instead of blocked; tile: the weights laid out by tile, as
NVFP4Linear holds them on a GPU)."""

import sys

import torch

import nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand

m, n, k = (int(x) for x in sys.argv[1:4])
dual, w4a16, w4a4 = "dual" in sys.argv[4:], "w4a16" in sys.argv[4:], "w4a4" in sys.argv[4:]
gen = torch.Generator(device="cuda").manual_seed(0)
tile = "tile" in sys.argv[4:]
layout = "linear" if "linear" in sys.argv[4:] or tile else "blocked"
a = random_operand(None, m, k, gen=gen, device="cuda", layout=layout)
b = random_operand(None, n, k, gen=gen, device="cuda", layout=layout)
b2 = random_operand(None, n, k, gen=gen, device="cuda", layout=layout)
x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
w, w2 = (b.data, b.sf), (b2.data, b2.sf)
if tile:
    w, w2 = (nk.layouts.to_expert_tiles(o.data[None], o.sf[None]) for o in (b, b2))
g = torch.tensor([0.5], device="cuda")
for _ in range(3):
    if w4a4 and dual:
        nk.dual_gemm_w4a4(x, w[0], w2[0], w[1], w2[1], global_scale=g)
    elif w4a4:
        nk.gemm_w4a4(x, *w, global_scale=g)
    elif w4a16 and dual:
        nk.dual_gemm_w4a16(x, w[0], w2[0], w[1], w2[1])
    elif w4a16:
        nk.gemm_w4a16(x, *w)
    elif dual:
        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
    else:
        nk.gemm(a.data, b.data, a.sf, b.sf)
torch.cuda.synchronize()
print("done", m, n, k, *sys.argv[4:])
