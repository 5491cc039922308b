"""GEMV benchmark: nvfp4 gemv against the memory-bandwidth speed of light.

    python -m benchmarks.bench_gemv [--json FILE] [--png FILE] [--quick]
        [--layouts linear,blocked] [--no-bf16] [--shapes 512x7168,4096x7168x8]

Per shape and scale layout: call time (median of CUDA events around one call,
L2 flushed before each, inputs rotated), achieved GB/s, fraction of SOL (bytes /
copy bandwidth measured in this run), the kernel's own time as the profiler
records it (no launch latency) and its fraction of SOL, cuBLAS bf16 time on
pre-dequantized operands (torch.matmul, events) and the speedup. At the start, the time of an empty
launch measured the same way: the floor under every single-call time here.
The three competition shapes first, then shapes away from them: M not a
multiple of 128, small M*L, L up to 8.
"""

from __future__ import annotations

import argparse
import json

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand, vector_operand, within_tolerance

from .common import L2Flush, cuda_time, geomean, kernel_time, measure_ceilings, pyplot

COMPETITION = [(7168, 16384, 1), (4096, 7168, 8), (7168, 2048, 4)]
EXTRA = [(512, 7168, 1), (1000, 7168, 1), (4000, 4096, 2), (2048, 16384, 8), (16384, 2048, 1), (8192, 8192, 3),
         (128, 4096, 1), (256, 16384, 1), (6000, 16384, 1)]


def gemv_bytes(m, k, L):
    return L * (m * k * 9 // 16 + k * 9 // 16 + 2 * m)


def run(shapes, layouts, json_path=None, png_path=None, bf16=True):
    ceil = measure_ceilings()
    flush = L2Flush()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device: {ceil.device}; torch {torch.__version__}; copy {ceil.bandwidth / 1e12:.2f} TB/s")
    one = torch.zeros(1, device="cuda")
    t_empty = cuda_time(lambda: one.zero_(), [()], flush=flush)
    print(f"empty launch (one-element zero_, same timing): {t_empty * 1e6:.1f} us")
    print(f"{'M':>6} {'K':>6} {'L':>2} {'layout':<8} {'us':>8} {'GB/s':>7} {'SOL us':>7} {'frac':>5} "
          f"{'kern us':>7} {'kfrac':>5} {'bf16 us':>8} {'speedup':>7}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for m, k, L in shapes:
        nbytes = gemv_bytes(m, k, L)
        sets = max(2, min(16, -(-4 * l2 // nbytes)))  # rotate over >= 4x L2 of inputs
        for layout in layouts:
            args = []
            for _ in range(sets):
                a = random_operand(L, m, k, gen=gen, device="cuda", layout=layout)
                b = vector_operand(random_operand(L, 1, k, gen=gen, device="cuda", layout=layout))
                args.append((a.data, b.data, a.sf, b.sf, torch.empty(L, m, dtype=torch.float16, device="cuda")))
            a0, b0, sfa0, sfb0, out0 = args[0]
            out = nk.gemv(a0, b0, sfa0, sfb0, out=out0)
            ref = reference.gemv(a0, b0, sfa0, sfb0)
            ok = bool(within_tolerance(out, ref).all())
            call = lambda a, b, sa, sb, o: nk.gemv(a, b, sa, sb, out=o)  # noqa: E731
            t = cuda_time(call, args, flush=flush)
            t_kern = kernel_time(call, args, flush=flush, match="gemv_kernel")
            t_bf16 = float("nan")
            if bf16:
                a_bf = reference.dequantize(a0, sfa0).to(torch.bfloat16)
                b_bf = reference.dequantize(b0.unsqueeze(-2), sfb0 if sfb0.dim() >= 5 else sfb0.unsqueeze(-2)).to(
                    torch.bfloat16)
                t_bf16 = cuda_time(lambda x, y: torch.matmul(x, y.transpose(-1, -2)), [(a_bf, b_bf)], flush=flush,
                                   reps=30)
                del a_bf, b_bf
            sol = nbytes / ceil.bandwidth
            row = dict(m=m, k=k, L=L, layout=layout, ok=ok, us=t * 1e6, gbps=nbytes / t / 1e9, sol_us=sol * 1e6,
                       frac_sol=sol / t, kernel_us=t_kern * 1e6, frac_sol_kernel=sol / t_kern, bf16_us=t_bf16 * 1e6, speedup=t_bf16 / t)
            rows.append(row)
            print(f"{m:>6} {k:>6} {L:>2} {layout:<8} {row['us']:8.1f} {row['gbps']:7.0f} {row['sol_us']:7.1f} "
                  f"{row['frac_sol']:5.2f} {row['kernel_us']:7.1f} {row['frac_sol_kernel']:5.2f} {row['bf16_us']:8.1f} {row['speedup']:7.2f}{'' if ok else '  WRONG'}",
                  flush=True)
            del args
    comp = [r for r in rows if (r["m"], r["k"], r["L"]) in COMPETITION]
    if comp:
        by_shape = {}
        for r in comp:
            by_shape.setdefault((r["m"], r["k"], r["L"]), []).append(r["frac_sol"])
        best = [max(v) for v in by_shape.values()]
        print(f"competition shapes: min frac {min(best):.3f}, geomean {geomean(best):.3f}")
        kern = {}
        for r in comp:
            kern.setdefault((r["m"], r["k"], r["L"]), []).append(r["frac_sol_kernel"])
        best = [max(v) for v in kern.values()]
        print(f"competition shapes, kernel time: min frac {min(best):.3f}, geomean {geomean(best):.3f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": ceil.device, "bandwidth": ceil.bandwidth, "empty_us": t_empty * 1e6, "rows": rows}, f,
                      indent=1)
    if png_path:
        plot(rows, ceil.device, png_path)
    return rows


def plot(rows, device, path):
    plt = pyplot()
    if plt is None:
        return
    labels = [f"{r['m']}x{r['k']} L{r['L']} {r['layout'][:3]}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 4))
    ax.bar(range(len(rows)), [r["frac_sol"] for r in rows], color=["C0" if r["layout"] == "linear" else "C1"
                                                                    for r in rows])
    ax.axhline(0.9, color="k", ls="--", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("fraction of speed of light (copy bandwidth)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"nvfp4 gemv on {device}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--quick", action="store_true", help="competition shapes, blocked layout only")
    ap.add_argument("--layouts", help="comma-separated scale layouts (default: linear,blocked; --quick: blocked)")
    ap.add_argument("--no-bf16", action="store_true", help="skip the cuBLAS bf16 comparison (A/B runs)")
    ap.add_argument("--shapes", help="comma-separated MxK or MxKxL instead of the default list (A/B runs)")
    args = ap.parse_args(argv)
    shapes = COMPETITION if args.quick else COMPETITION + EXTRA
    if args.shapes:
        shapes = [tuple(int(x) for x in (s.split("x") + ["1"])[:3]) for s in args.shapes.split(",")]
    layouts = ["blocked"] if args.quick else ["linear", "blocked"]
    if args.layouts:
        layouts = args.layouts.split(",")
    run(shapes, layouts, args.json, args.png, bf16=not args.no_bf16)


if __name__ == "__main__":
    main()
