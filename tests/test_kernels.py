"""Every CUDA kernel on shapes it can run, and the planner's report against what runs.

NVFP4_FORCE_KERNEL=name[:option] (csrc/cuda/plan.cu; read once per process) puts a kernel ahead
of the planner's table wherever it can run. test_forced runs, in a child process per kernel (and
variant), this file's cases for it and the kernel's own test file: each case asserts that
nvfp4_kernels.kernel_name names the forced kernel, that the profiler saw that kernel's function
launched, and the exact result into poisoned outputs. test_plan_is_what_runs checks, unforced,
that the kernel the planner reports is the one launched, over shapes of every route."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand
from conftest import HAS_CUDA, assert_matches
from helpers import FORCED, KERNEL_SYMBOLS, cublas_built, gemm_problem, gemv_problem, launched, poisoned, w4a16_slack, wgmma_built

ON_GPU = HAS_CUDA and torch.cuda.get_device_capability() >= (8, 0)


HERE = os.path.dirname(os.path.abspath(__file__))

# (op, L, M, N, K, layouts) per kernel: shapes each can run, tails and batches included.
CASES = {
    "gemv_dp4a": [("gemv", None, 300, 1, 1024, ("linear", "linear")), ("gemv", 3, 129, 1, 192, ("blocked", "linear")),
                  ("gemm", None, 3, 500, 2048, ("linear", "blocked")), ("gemm", 2, 300, 4, 512, ("blocked", "blocked")),
                  ("dual", None, 2, 700, 1024, ("blocked", "blocked")), ("dual", 2, 1, 129, 64, ("linear", "linear"))],
    "gemv_mma": [("gemm", None, 2, 600, 1024, ("linear", "linear")), ("gemm", 2, 7, 300, 2048, ("blocked", "blocked")),
                 ("gemm", None, 1000, 8, 4096, ("blocked", "linear")), ("dual", None, 5, 257, 1024, ("linear", "linear")),
                 ("dual", 3, 8, 129, 512, ("blocked", "blocked"))],
    "skinny": [("gemm", None, 2, 300, 512, ("linear", "linear")), ("gemm", 2, 9, 129, 1024, ("blocked", "linear")),
               ("gemm", None, 16, 4100, 4096, ("blocked", "blocked")), ("gemm", None, 5, 64, 65536, ("linear", "blocked"))],
    "wgmma": [("gemm", None, 1, 7, 64, ("linear", "linear")), ("gemm", 2, 33, 300, 2048, ("blocked", "linear")),
              ("gemm", None, 200, 513, 4096, ("blocked", "blocked")), ("dual", None, 5, 129, 1024, ("linear", "blocked")),
              ("dual", 2, 300, 200, 640, ("blocked", "blocked")), ("group", None, 129, 300, 1024, ("linear", "blocked")),
              # W4A16 (M = 40: a 64-row tile with rows past M)
              ("w4a16", None, 64, 7, 64, ("linear", "linear")), ("w4a16+", 2, 129, 300, 1024, ("linear", "blocked")),
              ("w4a16dual", None, 40, 129, 512, ("linear", "linear")), ("w4a16dual", 2, 200, 96, 2048, ("linear", "blocked")),
              ("w4a16", None, 200, 513, 4096, ("linear", "linear")),  # split-K over a cluster; stream-K:
              ("w4a16+", None, 128, 4096, 7168, ("linear", "blocked")), ("w4a16dual", None, 512, 3072, 7168, ("linear", "linear"))],
    "mma": [("gemm", None, 1, 1, 16, ("linear", "linear")), ("gemm", 2, 129, 300, 1040, ("blocked", "linear")),
            ("gemv", None, 300, 1, 1024, ("linear", "linear")), ("dual", None, 7, 129, 2048, ("blocked", "blocked")),
            ("group", None, 200, 65, 512, ("linear", "linear"))],
    "simt": [("gemm", None, 1, 1, 16, ("linear", "linear")), ("gemm", 2, 70, 90, 256, ("blocked", "linear")),
             ("gemv", None, 129, 1, 64, ("linear", "blocked")), ("dual", None, 65, 33, 80, ("linear", "linear")),
             ("group", None, 30, 40, 48, ("blocked", "blocked"))],
    "w4a16": [("w4a16", None, 1, 7, 16, ("linear", "linear")), ("w4a16", 2, 129, 300, 1040, ("linear", "blocked")),
              ("w4a16", None, 5, 4096, 4096, ("linear", "linear")), ("w4a16+", None, 300, 65, 2048, ("linear", "blocked")),
              ("w4a16dual", None, 8, 129, 512, ("linear", "linear")), ("w4a16dual", 2, 200, 96, 64, ("linear", "blocked")),
              # 512 and 544 tiles of 64 x 128: the cp.async kernel of 128-column tiles (fp16, bf16 activations)
              ("w4a16", None, 1024, 4096, 1024, ("linear", "linear")), ("w4a16+", None, 1025, 4096, 1024, ("linear", "blocked")),
              # few tiles: CTAs share a tile's K (K % 128 == 64: 16-row tiles, split 8; a dual's 4; 64-row tiles
              # split 5, batched)
              ("w4a16", None, 3, 300, 4032, ("linear", "linear")), ("w4a16dual", None, 16, 200, 2112, ("linear", "blocked")),
              ("w4a16+", 2, 40, 129, 3008, ("linear", "linear")),
              # scale rows 16-byte aligned (copied 4 K steps at a time), a tile's K shared from steps that are not a
              # multiple of 4 (64-row tiles, split 12)
              ("w4a16", None, 40, 64, 6400, ("linear", "linear")), ("w4a16dual", None, 40, 64, 6400, ("linear", "linear")),
              # M <= 16, K % 128 == 0: the GEMV kernel (8 warps share K; 8 or 16 rows a tile), split-K batched with
              # blocked scales; duals split; K % 128 == 64 stays on the 16-row tiles
              ("w4a16", None, 3, 300, 4096, ("linear", "linear")), ("w4a16+", 2, 7, 129, 8192, ("linear", "blocked")),
              ("w4a16+", 2, 13, 129, 8192, ("linear", "blocked")), ("w4a16dual", 2, 1, 300, 4096, ("blocked", "blocked")),
              ("w4a16dual", None, 16, 200, 2048, ("linear", "blocked")), ("w4a16", None, 2, 129, 1088, ("linear", "linear")),
              # M = 17..32: the GEMV's 32-row tiles (rows past M in the last n8 tiles), split, batched; duals on
              # the tiled kernels
              ("w4a16", None, 17, 129, 1024, ("linear", "linear")), ("w4a16+", 2, 32, 300, 4096, ("linear", "blocked")),
              ("w4a16+", None, 25, 4096, 2048, ("linear", "linear")), ("w4a16dual", 2, 27, 129, 1024, ("linear", "blocked")),
              ("w4a16dual", None, 32, 64, 4096, ("blocked", "blocked"))],
    # gemms whose result has x's type (fp16 unless "+": (M + N) odd takes bf16 x), rows 16-byte aligned; batches;
    # 2 slices of weight rows (the last shorter)
    "cublas": [("w4a16", None, 2, 8, 16, ("linear", "linear")), ("w4a16", 2, 130, 296, 1040, ("linear", "blocked")),
               ("w4a16+", None, 301, 64, 2048, ("linear", "blocked")), ("w4a16+", None, 1025, 4096, 1024, ("linear", "linear")),
               ("w4a16", None, 2, 8200, 16384, ("blocked", "linear"))],
}
# The epilogue's variants ("+": bf16 out, alphas as device tensors, a bias) on every kernel's first shapes.
for _kernel, _cases in CASES.items():
    if _kernel not in ("w4a16", "cublas"):
        _cases += [(op + "+", *rest) for op, *rest in _cases[:4]]
# A forced kernel (and variant) -> the test files run in its child besides this one.
FORCES = {"gemv_dp4a": [], "gemv_mma": ["test_w4a4.py"], "skinny": ["test_skinny.py"],
          "wgmma": ["test_epilogue.py", "test_grouped_mm.py", "test_pairs.py", "test_w4a4.py"],
          "wgmma:decode": ["test_tensor_cores.py", "test_epilogue.py", "test_pairs.py", "test_grouped_mm.py"],
          "mma": ["test_mma.py"], "mma:wk1": ["test_mma.py"], "mma:wk4": ["test_mma.py"], "simt": [],
          "w4a16": ["test_epilogue.py", "test_pairs.py", "test_w4a4.py"],
          "cublas": ["test_epilogue.py", "test_pairs.py", "test_w4a4.py"]}


def build(op, L, m, n, k, layouts, gen, device):
    """(args for nk.kernel_name, call into poisoned outputs, outputs, references[, the references'
    slack: W4A16's fp32 sums of inexact products, helpers.w4a16_slack]). An op name ending
    in "+" runs the epilogue's variants: bf16 out, alphas as device tensors, a bias (gemm)."""
    plus = op.endswith("+")
    op = op.rstrip("+")
    dtype = torch.bfloat16 if plus else torch.float16
    lead = (L,) if L else ()
    alpha = torch.tensor(-0.75, device=device) if plus else 0.5
    if op == "gemv":
        a, b = gemv_problem(L, m, k, gen, device, layouts)
        out = poisoned(lead + (m,), device).to(dtype)
        args = (a.data, b.data, a.sf, b.sf)
        return args, lambda: nk.gemv(*args, out=out, alpha=alpha), [out], [reference.gemv(*args, alpha, dtype)]
    if op == "group":
        probs = [gemm_problem(None, m + g, n - g, k, gen, device, layouts) for g in range(3)]
        outs = [poisoned((m + g, n - g), device).to(dtype) for g in range(3)]
        alphas = torch.tensor([0.5, -2.0, 3.0], device=device) if plus else None
        args = ([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs], [b.sf for _, b in probs])
        return (args, lambda: nk.group_gemm(*args, outs=outs, alphas=alphas), outs,
                reference.group_gemm(*args, alphas, dtype))
    if op.startswith("w4a16"):
        b = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1])
        x = torch.randn(lead + (m, k), generator=gen).to(torch.bfloat16 if (m + n) % 2 else torch.float16).to(device)
        out = poisoned(lead + (m, n), device).to(dtype)
        # bf16 x: a bias of the output's type (what cuBLASLt's epilogue takes), else float32
        bias = torch.randn(n, device=device).to(dtype if x.dtype == dtype else torch.float32) if plus else None
        if op == "w4a16":
            args = (x, b.data, b.sf)
            return (args, lambda: nk.gemm_w4a16(*args, out=out, alpha=alpha, bias=bias), [out],
                    [reference.gemm_w4a16(*args, alpha, bias, dtype)], [w4a16_slack(x, b.data, b.sf, alpha)])
        b2 = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1])
        args = (x, b.data, b2.data, b.sf, b2.sf)
        return (args, lambda: nk.dual_gemm_w4a16(*args, out=out, alpha1=2.0, alpha2=0.25), [out],
                [reference.dual_gemm_w4a16(*args, 2.0, 0.25, dtype)], [w4a16_slack(x, b.data, b.sf, 2.0, b2.data, b2.sf, 0.25)])
    a, b = gemm_problem(L, m, n, k, gen, device, layouts)
    out = poisoned(lead + (m, n), device).to(dtype)
    if op == "gemm":
        args = (a.data, b.data, a.sf, b.sf)
        bias = torch.randn(n, device=device).to(torch.bfloat16) if plus else None
        return (args, lambda: nk.gemm(*args, out=out, alpha=alpha, bias=bias), [out],
                [reference.gemm(*args, alpha, bias, dtype)])
    b2 = random_operand(L, n, k, gen=gen, device=device, layout=layouts[1])
    args = (a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
    alpha2 = 3.0 if plus else None
    return (args, lambda: nk.dual_gemm(*args, out=out, alpha1=alpha if plus else None, alpha2=alpha2), [out],
            [reference.dual_gemm(*args, alpha if plus else None, alpha2, dtype)])


OP_NAMES = {"gemv": "gemv", "gemm": "gemm", "dual": "dual_gemm", "group": "group_gemm", "w4a16": "gemm_w4a16",
            "w4a16dual": "dual_gemm_w4a16"}


def check(case, gen, want=None):
    """Run a case on the GPU: the planner's kernel (== want, if given) is what launched; the result
    is exact. Returns the planner's report."""
    args, call, outs, refs, *slacks = build(*case, gen, "cuda")
    plan = nk.kernel_name(OP_NAMES[case[0].rstrip("+")], *args)
    kernel = plan.split(" ")[0]
    if want is not None:
        assert kernel == want, f"{case}: planned {plan!r}, forced {want}"
    _, names = launched(call)
    assert any(KERNEL_SYMBOLS[kernel] in x for x in names), f"{case}: planned {plan!r}, launched {names}"
    for g, (o, r) in enumerate(zip(outs, refs)):
        assert_matches(o, r, f"{case} group {g} on {plan}", slack=slacks[0][g] if slacks else None)
    return plan


FORCED_CASES = [(k, c) for k, cases in CASES.items() for c in cases]


@pytest.mark.skipif(not ON_GPU or not FORCED, reason="runs in test_forced's child, with a kernel forced")
@pytest.mark.parametrize("kernel,case", FORCED_CASES, ids=[f"{k}-{c[0]}-{c[1]}x{c[2]}x{c[3]}x{c[4]}" for k, c in FORCED_CASES])
def test_forced_case(gen, kernel, case):
    if kernel != FORCED:
        pytest.skip(f"{kernel}'s case, {FORCED} forced")
    if kernel == "wgmma" and not wgmma_built():
        pytest.skip("the wgmma kernel needs a Hopper GPU and a build with sm_90a code")
    plan = check(case, gen, want=kernel)
    force = os.environ.get("NVFP4_FORCE_KERNEL", "")
    if force == "mma:wk4":
        assert "64x64" in plan, plan
    if force == "mma:wk1":
        assert "128x128" in plan, plan


@pytest.mark.skipif(not ON_GPU or bool(FORCED), reason="needs an sm_80+ GPU; a kernel is forced")
@pytest.mark.parametrize("force", list(FORCES))
def test_forced(force):
    """This file's cases for one kernel (and its own test file, where it has one) in a child process
    with NVFP4_FORCE_KERNEL=force."""
    if force.startswith("wgmma") and not wgmma_built():
        pytest.skip("the wgmma kernel needs a Hopper GPU and a build with sm_90a code")
    if force == "cublas" and not cublas_built():
        pytest.skip("the cuBLASLt path is tested on Hopper, in a build that found cublasLt.h")
    files = [os.path.join(HERE, "test_kernels.py")] + [os.path.join(HERE, f) for f in FORCES[force]]
    env = dict(os.environ, NVFP4_FORCE_KERNEL=force)
    # the GPU tests only: the CPU ones do not depend on the forced kernel; a few processes where
    # pytest-xdist is there (a child's serial run is the suite's longest test)
    xdist = ["-n", "3"] if importlib.util.find_spec("xdist") else []
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, "-k", "not cpu", *files],
                       env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]


# Unforced: shapes of every route the table has (which kernel each takes depends on the GPU).
ROUTES = [("gemv", None, 7168, 1, 2048, ("linear", "linear")), ("gemm", None, 4, 4096, 1024, ("linear", "blocked")),
          ("gemm", None, 3, 4096, 7168, ("linear", "linear")), ("gemm", None, 8, 4096, 8192, ("blocked", "linear")),
          ("gemm", None, 8, 7168, 16384, ("linear", "linear")), ("gemm", None, 12, 4096, 16384, ("linear", "linear")),
          ("gemm", None, 1000, 8, 4096, ("linear", "linear")), ("gemm", None, 128, 4096, 7168, ("blocked", "blocked")),
          ("gemm", 2, 1000, 4100, 256, ("linear", "linear")), ("gemm", None, 300, 200, 1040, ("linear", "linear")),
          ("dual", None, 4, 4096, 7168, ("blocked", "blocked")), ("dual", None, 256, 3072, 4096, ("blocked", "blocked")),
          ("group", None, 80, 4096, 7168, ("linear", "blocked")), ("group", None, 100, 200, 48, ("linear", "linear")),
          ("gemm+", None, 3, 4096, 7168, ("linear", "linear")), ("gemm+", None, 1000, 8, 4096, ("linear", "linear")),
          ("gemm+", None, 12, 4096, 16384, ("linear", "linear")), ("dual+", None, 4, 4096, 7168, ("blocked", "blocked")),
          ("w4a16", None, 1, 4096, 4096, ("linear", "linear")), ("w4a16dual", None, 256, 3072, 4096, ("linear", "linear")),
          ("w4a16+", None, 300, 4096, 1024, ("linear", "blocked")), ("w4a16", None, 40, 4096, 1024, ("linear", "linear")),
          ("w4a16+", None, 1025, 4096, 1024, ("linear", "linear")), ("w4a16dual", None, 2048, 1024, 1024, ("linear", "linear")),
          ("w4a16+", None, 2049, 1024, 8192, ("linear", "blocked"))]


@pytest.mark.skipif(not ON_GPU or bool(FORCED), reason="needs an sm_80+ GPU; a kernel is forced")
@pytest.mark.parametrize("case", ROUTES, ids=[f"{c[0]}-{c[2]}x{c[3]}x{c[4]}" for c in ROUTES])
def test_plan_is_what_runs(gen, case):
    check(case, gen)


def test_kernel_name_on_cpu(gen):
    """On CPU tensors the planner is not asked: the CPU kernels run everything."""
    a, b = gemm_problem(None, 3, 5, 64, gen, "cpu")
    assert nk.kernel_name("gemm", a.data, b.data, a.sf, b.sf) == "cpu"
    with pytest.raises(ValueError, match="op must be"):
        nk.kernel_name("gemmm", a.data, b.data, a.sf, b.sf)
    with pytest.raises(ValueError, match="takes 4 tensors"):
        nk.kernel_name("gemm", a.data, b.data, a.sf)
    with pytest.raises(ValueError, match="K/2"):
        nk.kernel_name("gemm", a.data, b.data[:, :16], a.sf, b.sf)
