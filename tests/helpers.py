"""Problem builders for the tests: operands from nvfp4_kernels.testing, outputs
poisoned with NaN, and the reference result."""

import functools
import os
import subprocess
import sys

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand, vector_operand

LAYOUTS = ("linear", "blocked")


def layouts_for(*ints):
    """A deterministic (a, b) layout pair that varies with the shape, so a sweep
    over shapes covers all four combinations."""
    i = sum(ints)
    return LAYOUTS[i % 2], LAYOUTS[(i // 2) % 2]


def poisoned(shape, device):
    return torch.full(shape, float("nan"), dtype=torch.float16, device=device)


def gemm_problem(L, m, n, k, gen, device, layouts=("linear", "linear"), **kw):
    a = random_operand(L, m, k, gen=gen, device=device, layout=layouts[0], **kw)
    b = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1], **kw)
    return a, b


def gemv_problem(L, m, k, gen, device, layouts=("linear", "linear"), **kw):
    a = random_operand(L, m, k, gen=gen, device=device, layout=layouts[0], **kw)
    b = vector_operand(random_operand(L, 1, k, gen=gen, device=device, layout=layouts[1], **kw))
    return a, b


def ref_gemm(a, b, alpha=None):
    return reference.gemm(a.data, b.data, a.sf, b.sf, alpha)


def ref_gemv(a, b, alpha=None):
    return reference.gemv(a.data, b.data, a.sf, b.sf, alpha)


def w4a16_slack(x, b1, sfb1, alpha1=1.0, b2=None, sfb2=None, alpha2=1.0):
    """What an fp32 sum of W4A16 products may be off by, carried to the output. The products
    (e2m1 x e4m3 x a 16-bit value: up to 17 significant bits) are exact in fp32 but their sums
    round; a sum of K terms in any order is off by about sqrt(K) u sum|terms| (u = 2^-24, one
    standard deviation and more): four times that. For the dual, carried through
    silu(a1 c1) * (a2 c2) (|silu'| < 1.1). The W4A4 products have so few bits that their sums
    stay within atol + rtol |ref| without this."""
    k = x.shape[-1]
    xa = x.double().abs()

    def bound(b, sfb, alpha):
        w = reference.dequantize(b, sfb).abs().transpose(-1, -2)
        return abs(float(alpha)) * 4 * k**0.5 * 2.0**-24 * (xa @ w.to(xa.device))

    e1 = bound(b1, sfb1, alpha1)
    if b2 is None:
        return e1
    xd = x.double()
    c1 = float(alpha1) * (xd @ reference.dequantize(b1, sfb1).transpose(-1, -2).to(xd.device))
    c2 = float(alpha2) * (xd @ reference.dequantize(b2, sfb2).transpose(-1, -2).to(xd.device))
    e2 = bound(b2, sfb2, alpha2)
    return 1.1 * e1 * (c2.abs() + e2) + (torch.nn.functional.silu(c1).abs() + 1.1 * e1) * e2


@functools.cache
def wgmma_built():
    """A Hopper GPU and this build's sm_90a code (a compute_80-only build runs the mma.sync kernel
    there): the planner takes the wgmma kernel for a 128 x 4096 x 7168 gemm wherever it can."""
    if not (nk.WITH_CUDA and torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        return False
    a, b = gemm_problem(None, 128, 4096, 7168, torch.Generator().manual_seed(0), "cuda")
    return nk.kernel_name("gemm", a.data, b.data, a.sf, b.sf).startswith("wgmma")


@functools.cache
def cublas_built():
    """A Hopper GPU and this build's cuBLASLt path (csrc/cuda/cublas.cu: built where setup.py found cublasLt.h,
    run where the process has the library): the planner takes it for a W4A16 gemm of 2048 rows there."""
    if not (nk.WITH_CUDA and torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        return False
    x = torch.zeros(2048, 1024, dtype=torch.bfloat16, device="cuda")
    b = random_operand(None, 1024, 1024, gen=torch.Generator().manual_seed(0), device="cuda")
    return nk.kernel_name("gemm_w4a16", x, b.data, b.sf).startswith("cublas")


def launched(fn):
    """Run fn once under the profiler; return (result, names of the CUDA kernels it launched)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return out, {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}


# NVFP4_FORCE_KERNEL (csrc/cuda/plan.cu): a kernel taken ahead of the planner's table wherever it can
# run; the forced-kernel tests set it in child processes.
FORCED = os.environ.get("NVFP4_FORCE_KERNEL", "").split(":")[0]

# The CUDA kernel function each of the planner's kernel names launches.
KERNEL_SYMBOLS = {"gemv_dp4a": "gemv_dp4a_kernel", "gemv_mma": "gemv_mma_kernel", "skinny": "skinny_kernel",
                  "wgmma": "matmul_sm90_kernel", "mma": "matmul_mma_kernel", "simt": "matmul_simt_kernel",
                  "w4a16": "w4a16_kernel", "cublas": "decode_kernel"}


def is_gemv(name):
    """Whether a launched kernel's name is one of the two GEMV kernels'."""
    return "gemv_dp4a_kernel" in name or "gemv_mma_kernel" in name


def skinny_expected(m, n, k, batch=1):
    """Whether a gemm of M rows, N and K (aligned operands, N > 4) runs the skinny kernel on this
    GPU by the planner's table (csrc/cuda/plan.cu): M = 5..16 (on Hopper K >= 8192, and for M > 8
    L N K >= 2^26), where the integer-mma GEMV does not take it first (N = 5..8 weight rows as
    vectors; on Hopper also M = 5..8 as vectors); forced, wherever it can run (M = 2..16)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0) or k % 256:
        return False
    if FORCED:
        return FORCED == "skinny" and 2 <= m <= 16
    if mma_rule("gemm", n, m, k, batch):
        return False
    if torch.cuda.get_device_capability() == (9, 0):
        if m <= 8 and mma_rule("gemm", m, n, k, batch):  # the integer-mma GEMV goes first there
            return False
        return 5 <= m <= 16 and k >= 8192 and (m <= 8 or batch * n * k >= 2**26)
    return 5 <= m <= 16


def mma_share_steps(op, n, k, L):
    """The steps of 128 K of the busiest CTA on the integer-mma GEMV, a CTA per SM, which its 16
    warps share (csrc/cuda/gemv_mma.cu, gemv_mma_share_steps; sets of 8 weight rows for the dual,
    16 for the gemm)."""
    sets = -(-n // (8 if op == "dual" else 16))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ctas = max(1, min(sms // max(L or 1, 1), sets))
    return -(-sets // ctas) * (k // 128)


def mma_rule(op, m, n, k, L=None):
    """Whether the integer-mma GEMV takes M = m vectors against n rows of K = k (csrc/cuda/plan.cu,
    gemv_mma_pays; aligned operands; forced: wherever it fits, the tests' K <= 16384 does). K % 128
    == 0, and by the busiest CTA's steps: 4 vectors always; 2 or 3 from 56 steps; 5 or 6 below
    448 (the dual: always), 7 or 8 below 160 (the dual: 256)."""
    if not torch.cuda.is_available() or k % 128 or not 2 <= m <= 8 or (m > 4 and k > 16384):
        return False
    if FORCED:
        return FORCED == "gemv_mma"
    if m == 4:
        return True
    steps = mma_share_steps(op, n, k, L)
    if m > 4:
        if op == "dual":
            return m <= 6 or steps < 16 * 16
        return steps < (28 * 16 if m <= 6 else 10 * 16)
    return steps >= 56


def captured_graph(fn):
    """fn run once on a side stream (the warm-up outside the capture), then captured: the CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def gemm_graph_replays(m, n, k, gen, replays):
    """A gemm of M x N x K captured in a CUDA graph, then replayed on new inputs copied into the
    captured ones, its output poisoned before each replay: yields (output, reference) per replay."""
    a, b = gemm_problem(None, m, n, k, gen, "cuda")
    inputs = [x.clone() for x in (a.data, b.data, a.sf, b.sf)]
    out = poisoned((m, n), "cuda")
    graph = captured_graph(lambda: nk.gemm(*inputs, out=out))
    for _ in range(replays):
        a2, b2 = gemm_problem(None, m, n, k, gen, "cuda")
        for dst, src in zip(inputs, (a2.data, b2.data, a2.sf, b2.sf)):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        yield out, ref_gemm(a2, b2)


def random_layer(n, k, bias, mode, gen, device="cpu", dtype=torch.bfloat16):
    """An NVFP4Linear with random buffers: every e2m1 code, e4m3 scales over several binades (dot
    products ~1), a per-tensor weight scale, and an input_scale for activations of amax ~2..5."""
    from nvfp4_kernels.nn import NVFP4Linear

    layer = NVFP4Linear(k, n, bias, mode=mode, dtype=dtype, device=device)
    w = random_operand(None, n, k, gen=gen, dtype=torch.uint8)
    with torch.no_grad():
        layer.set_weight_codes(w.data)
        layer.set_weight_scales(w.sf)
        layer.weight_scale_2.fill_(0.5 + torch.rand((), generator=gen).item())
        if mode == "w4a4":
            layer.input_scale.fill_((2.0 + 3.0 * torch.rand((), generator=gen).item()) / (6.0 * 448.0))
        if bias:
            layer.bias.copy_(torch.randn(n, generator=gen) * 4)
    layer.update_derived_scales()
    return layer


def run_python(args, **env):
    """python <args> in a fresh interpreter that imports the package as this one does (built in
    place in a clone, or installed), with these environment variables added."""
    import nvfp4_kernels

    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(nvfp4_kernels.__file__)))
    env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(filter(None, [pkg_parent, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, env=env)


def run_example(name, *args):
    """examples/<name> in a fresh interpreter (run_python)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return run_python([os.path.join(root, "examples", name), *args])
