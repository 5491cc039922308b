"""GEMM and dual-GEMM benchmark against both ceilings, with a roofline plot.

    python -m benchmarks.bench_gemm [--op gemm dual] [--quick] [--no-bf16] [--json FILE] [--png FILE]

Per shape: kernel time (median of CUDA events around one call, L2 flushed before
each, inputs rotated over >= 4x L2), TFLOP/s, GB/s, fraction of speed of light
(SOL = max(bytes / copy bandwidth, flops / fp16 matmul rate), both measured in
this run), cuBLAS bf16 time on operands pre-dequantized to bf16 (torch.matmul;
for dual plus silu * mul) and the speedup. The competition shapes first, then
large M, square 8192^3 and small M (1 to 64, where streaming B bounds the time).
The PNG draws achieved TFLOP/s against arithmetic intensity (flop per byte of
compulsory traffic) under the two measured ceilings.
"""

from __future__ import annotations

import argparse
import json

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.testing import random_operand, within_tolerance

from .common import L2Flush, cuda_time, geomean, measure_ceilings, pyplot


def competition(op):
    return [(s["m"], s["n"], s["k"]) for s in tasks.shapes(op)["benchmarks"]]


LARGE = [(512, 4096, 7168), (1024, 7168, 2048), (1024, 16384, 4096), (4096, 4096, 4096), (4096, 2048, 16384),
         (8192, 8192, 8192)]
SMALL_M = [(1, 7168, 16384), (2, 7168, 16384), (3, 4096, 7168), (4, 7168, 16384), (8, 7168, 16384),
           (16, 7168, 16384), (32, 4096, 7168), (64, 7168, 2048), (64, 7168, 16384)]
SMALL_M_DUAL = [(1, 4096, 7168), (2, 4096, 7168), (4, 4096, 7168), (1, 14336, 4096), (8, 4096, 7168),
                (64, 4096, 7168)]


def nbytes(m, n, k, nb):
    """Compulsory traffic: fp4 data and e4m3 scales of A and of nb B operands, fp16 C."""
    return (m + nb * n) * k * 9 // 16 + 2 * m * n


def shapes_for(op, which):
    """which: "all", "quick" (competition shapes), "small" (small M only) or a list of (M, N, K)."""
    if not isinstance(which, str):
        return which
    name = "gemm" if op == "gemm" else "dual_gemm"
    small = SMALL_M if op == "gemm" else SMALL_M_DUAL
    if which == "small":
        return small
    if which == "quick":
        return competition(name)
    return competition(name) + (LARGE if op == "gemm" else LARGE[:3]) + small


def run(ops, which, json_path=None, png_path=None, bf16=True):
    ceil = measure_ceilings()
    flush = L2Flush()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device: {ceil.device}; torch {torch.__version__}; copy {ceil.bandwidth / 1e12:.2f} TB/s; "
          f"fp16 matmul {ceil.fp16_rate / 1e12:.0f} TFLOP/s")
    print(f"{'op':<5} {'M':>5} {'N':>6} {'K':>6} {'us':>9} {'TFLOP/s':>8} {'GB/s':>6} {'SOL us':>8} {'frac':>5} "
          f"{'bf16 us':>8} {'speedup':>7}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for op in ops:
        name = "gemm" if op == "gemm" else "dual_gemm"
        shapes = shapes_for(op, which)
        nb = 1 if op == "gemm" else 2
        for m, n, k in shapes:
            size = nbytes(m, n, k, nb)
            sets = max(2, min(8, -(-4 * l2 // size)))
            args = []
            for _ in range(sets):
                a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
                bs = [random_operand(None, n, k, gen=gen, device="cuda", layout="blocked") for _ in range(nb)]
                out = torch.empty(m, n, dtype=torch.float16, device="cuda")
                if op == "gemm":
                    args.append((a.data, bs[0].data, a.sf, bs[0].sf, out))
                else:
                    args.append((a.data, bs[0].data, bs[1].data, a.sf, bs[0].sf, bs[1].sf, out))
            if op == "gemm":
                fn = lambda a, b, sa, sb, o: nk.gemm(a, b, sa, sb, out=o)  # noqa: E731
                ref = reference.gemm(*args[0][:4])
            else:
                fn = lambda a, b1, b2, sa, s1, s2, o: nk.dual_gemm(a, b1, b2, sa, s1, s2, out=o)  # noqa: E731
                ref = reference.dual_gemm(*args[0][:6])
            out = fn(*args[0])
            ok = bool(within_tolerance(out, ref).all())
            t = cuda_time(fn, args, flush=flush, reps=50)
            t_bf = bf16_time(op, args[0], nb, flush) if bf16 else float("nan")
            del args
            flops = 2 * nb * m * n * k
            sol = ceil.sol_seconds(size, flops)
            row = dict(op=op, m=m, n=n, k=k, ok=ok, us=t * 1e6, tflops=flops / t / 1e12, gbps=size / t / 1e9,
                       sol_us=sol * 1e6, frac_sol=sol / t, bf16_us=t_bf * 1e6, speedup=t_bf / t,
                       intensity=flops / size, competition=(m, n, k) in competition(name))
            rows.append(row)
            print(f"{op:<5} {m:>5} {n:>6} {k:>6} {row['us']:9.1f} {row['tflops']:8.1f} {row['gbps']:6.0f} "
                  f"{row['sol_us']:8.1f} {row['frac_sol']:5.2f} {row['bf16_us']:8.1f} {row['speedup']:7.2f}"
                  f"{'' if ok else '  WRONG'}", flush=True)
        comp = [r["frac_sol"] for r in rows if r["op"] == op and r["competition"]]
        if comp:
            print(f"{op} competition shapes: min frac {min(comp):.3f}, geomean {geomean(comp):.3f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": ceil.device, "bandwidth": ceil.bandwidth, "fp16_rate": ceil.fp16_rate,
                       "rows": rows}, f, indent=1)
    if png_path:
        plot(rows, ceil, png_path)
    return rows


def bf16_time(op, x, nb, flush):
    """cuBLAS on the operands of argument set x pre-dequantized to bf16 (dual: plus silu * mul)."""
    a_bf = reference.dequantize(x[0], x[nb + 1]).to(torch.bfloat16)
    b_bf = [reference.dequantize(x[1 + i], x[nb + 2 + i]).to(torch.bfloat16).t() for i in range(nb)]
    if op == "gemm":
        bf = lambda: torch.matmul(a_bf, b_bf[0])  # noqa: E731
    else:
        bf = lambda: torch.nn.functional.silu(torch.matmul(a_bf, b_bf[0])) * torch.matmul(a_bf, b_bf[1])  # noqa: E731
    return cuda_time(bf, [()], flush=flush, reps=30)


def plot(rows, ceil, path):
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["intensity"] for r in rows]
    lo, hi = min(xs) / 2, max(xs) * 2
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(ceil.bandwidth * x, ceil.fp16_rate) / 1e12 for x in grid], "k-", lw=1,
            label=f"ceilings: {ceil.bandwidth / 1e12:.2f} TB/s, {ceil.fp16_rate / 1e12:.0f} TFLOP/s")
    for op, marker in (("gemm", "o"), ("dual", "s")):
        sel = [r for r in rows if r["op"] == op]
        if sel:
            ax.scatter([r["intensity"] for r in sel], [r["tflops"] for r in sel], marker=marker,
                       c=["C3" if r["competition"] else "C0" for r in sel], label=f"{op} (red: competition shapes)")
            for r in sel:
                ax.annotate(f"{r['m']}x{r['n']}x{r['k']}", (r["intensity"], r["tflops"]), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop / byte of compulsory traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"nvfp4 gemm on {ceil.device}")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def k_sweep(m=128, n=7168, ks=(256, 512, 1024, 2048, 4096, 8192)):
    """Time against K at fixed M, N: the intercept is the fixed cost of a call
    (launch, pipeline fill, epilogue), the slope the cost per K step."""
    flush = L2Flush()
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"K sweep at M={m} N={n}:")
    for k in ks:
        args = []
        for _ in range(4):
            a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
            b = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
            args.append((a.data, b.data, a.sf, b.sf, torch.empty(m, n, dtype=torch.float16, device="cuda")))
        t = cuda_time(lambda a, b, sa, sb, o: nk.gemm(a, b, sa, sb, out=o), args, flush=flush, reps=50)
        print(f"  K={k:>6} {t * 1e6:8.2f} us  {2 * m * n * k / t / 1e12:6.1f} TFLOP/s", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", nargs="*", default=["gemm", "dual"], choices=["gemm", "dual"])
    ap.add_argument("--quick", action="store_true", help="competition shapes only")
    ap.add_argument("--small", action="store_true", help="small-M shapes only")
    ap.add_argument("--shapes", nargs="+", metavar="MxNxK", help="only these shapes")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--no-bf16", action="store_true", help="skip the cuBLAS bf16 comparison (A/B runs)")
    ap.add_argument("--k-sweep", action="store_true", help="only: time against K at M=128, N=7168")
    args = ap.parse_args(argv)
    if args.k_sweep:
        return k_sweep()
    which = [tuple(int(x) for x in sh.split("x")) for sh in args.shapes] if args.shapes else (
        "quick" if args.quick else "small" if args.small else "all")
    run(args.op, which, args.json, args.png, bf16=not args.no_bf16)


if __name__ == "__main__":
    main()
