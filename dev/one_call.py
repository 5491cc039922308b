"""One nvfp4 gemm (or dual) call of a given shape, after a warm-up, for Nsight
Compute: ncu --clock-control none -k regex:matmul_sm90 -s 2 -c 1 python dev/one_call.py M N K [dual]"""

import sys

import torch

import nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand

m, n, k = (int(x) for x in sys.argv[1:4])
dual = len(sys.argv) > 4 and sys.argv[4] == "dual"
gen = torch.Generator(device="cuda").manual_seed(0)
a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
b = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
for _ in range(3):
    if dual:
        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
    else:
        nk.gemm(a.data, b.data, a.sf, b.sf)
torch.cuda.synchronize()
print("done", m, n, k, "dual" if dual else "")
