"""Mixture-of-experts blocks, NVFP4 (nn.NVFP4MoE, W4A4 and W4A16) against bf16, at every token count.

    python -m benchmarks.bench_moe [--model deepseek-v3 qwen3-30b-a3b] [--t 1,8,64] [--routing uniform skewed]
                                   [--mode w4a4 w4a16] [--parts] [--json F] [--png F]

One MoE block's experts: router logits in, output out (routing, the pairs sorted by expert, gate+up,
SiLU * mul, down, the weighted combine; the router's linear and shared experts are not part of it).
Against, with the same routing and the same permutation code: bf16 torch._grouped_mm (rows grouped
by cumulative offsets on the device, as ours), and a loop of bf16 F.linear per expert (the group
sizes read on the host before capture, as a framework without a grouped GEMM runs it). GPU time per
block from CUDA-graph replays of a chain of blocks over enough copies of the experts that the
active ones exceed L2; median of replays. Routing: "uniform" (random logits), "skewed" (logits plus
-2 log(rank): a few experts take most tokens). Speed of light (SOL) = max(the active experts'
NVFP4 bytes / copy rate, flops / fp16 tensor rate), both measured in this run. --parts: each op of
our block also timed alone (graph replays of that op only: no overlap with its neighbours).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F

import nvfp4_kernels as nk
from nvfp4_kernels.nn import NVFP4MoE

from .common import graph_time, measure_ceilings, pyplot

# hidden H, expert intermediate I, experts E, top_k
MODELS = {"deepseek-v3": (7168, 2048, 256, 8), "qwen3-30b-a3b": (2048, 768, 128, 8)}
TOKENS = [1, 8, 64, 512, 4096]
ROUTINGS = ("uniform", "skewed")
L2_BYTES = 4 * 60 * 2**20  # active weights walked per chain: several times an H100 / H200 L2
MAX_COPIES = 16


def expert_bytes(h, i, mode):
    """One expert's weight bytes (gate, up, down)."""
    return 3 * h * i * 2 if mode == "bf16" else 3 * h * i * 9 // 16


def logits_of(t, e, routing, gen):
    z = torch.randn(t, e, generator=gen, device="cuda")
    if routing == "skewed":
        z = z - 2 * torch.log(torch.arange(1, e + 1, device="cuda", dtype=torch.float32))
    return z


def random_moe(h, i, e, k, mode, gen, dtype=torch.bfloat16):
    """An NVFP4MoE of random codes and scales (its speed does not depend on the values), laid out for
    dtype's activations (bf16: repacked) and by tile."""
    moe = NVFP4MoE(e, h, i, k, mode=mode, dtype=dtype, device="cuda")
    for name in ("w13_weight", "w2_weight"):
        buf = getattr(moe, name).view(torch.uint8)  # any bits are codes, in either layout
        buf.copy_(torch.randint(0, 256, buf.shape, generator=gen, device="cuda", dtype=torch.uint8))
    for name in ("w13_weight_scale", "w2_weight_scale"):
        buf = getattr(moe, name)
        buf.copy_((torch.rand(buf.shape, generator=gen, device="cuda") + 0.5).to(torch.float8_e4m3fn))
    moe.w13_weight_scale_2.fill_(1e-3)
    moe.w2_weight_scale_2.fill_(1e-3)
    if mode == "w4a4":
        moe.w13_input_scale.fill_(1e-2)
        moe.w2_input_scale.fill_(1e-2)
    moe.update_derived_scales()
    return moe


def grouping(logits, k):
    """(weights, order, token of each sorted pair, offs) as NVFP4MoE routes (softmax, renormalised),
    the pairs grouped by expert with torch's ops (a bf16 block's way: stable sort, search)."""
    p = logits.float().softmax(-1)
    w, ids = p.topk(k, -1)
    experts = torch.arange(logits.shape[1], device=logits.device, dtype=torch.int32)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    offs = torch.searchsorted(flat[order].to(torch.int32), experts, right=True, out_int32=True)
    return w / w.sum(-1, keepdim=True), order, order // k, offs


def bf16_block(x, logits, w13, w2, k, loop_sizes=None):
    """The same block in bf16: torch._grouped_mm (loop_sizes None) or a loop of F.linear over the
    experts' host-known row counts."""
    w, order, token, offs = grouping(logits, k)
    rows = x[token]
    if loop_sizes is None:
        h = torch._grouped_mm(rows, w13.transpose(-2, -1), offs=offs)
        g, u = h.chunk(2, -1)
        y = torch._grouped_mm(F.silu(g) * u, w2.transpose(-2, -1), offs=offs)
    else:
        parts, start = [], 0
        for ex, n in enumerate(loop_sizes):
            if n:
                g, u = F.linear(rows[start:start + n], w13[ex]).chunk(2, -1)
                parts.append(F.linear(F.silu(g) * u, w2[ex]))
            start += n
        y = torch.cat(parts)
    pairs = torch.empty_like(y).index_copy_(0, order, y)
    return (pairs.view(x.shape[0], k, -1).float() * w[..., None]).sum(1).to(x.dtype)


def parts_time(moes, x, logits, e):
    """GPU seconds of each op of the block, each timed alone over the experts' copies."""
    weights, ids = moes[0].route(logits)
    token_of_row, _, row_of_pair, offs = nk.moe_sort(ids, e)
    hs = [m._gate_up(x, offs, token_of_row) for m in moes]
    ys = [m._down(h, offs) for m, h in zip(moes, hs)]
    return dict(route=graph_time([lambda: moes[0].route(logits)] * len(moes), replays=10),
                sort=graph_time([lambda: nk.moe_sort(ids, e)] * len(moes), replays=10),
                gate_up=graph_time([lambda m=m: m._gate_up(x, offs, token_of_row) for m in moes], replays=10),
                down=graph_time([lambda m=m, h=h: m._down(h, offs) for m, h in zip(moes, hs)], replays=10),
                combine=graph_time([lambda y=y: nk.moe_combine(y, row_of_pair, weights) for y in ys], replays=10))


def run(models, tokens, routings, modes, json_path=None, png_path=None, parts=False):
    ceil = measure_ceilings()
    print(f"{ceil.device}: copy {ceil.bandwidth / 1e12:.2f} TB/s, fp16 mma {ceil.fp16_rate / 1e12:.0f} TFLOP/s "
          "(this run's ceilings)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"{'model':>14} {'routing':>8} {'T':>5} {'mode':>6} {'active':>6} {'us':>9} {'grouped':>9} {'speedup':>8} "
          f"{'loop':>9} {'speedup':>8} {'SOL':>6}")
    for model in models:
        h, i, e, k = MODELS[model]
        for t in tokens:
            for routing in routings:
                logits = logits_of(t, e, routing, gen)
                x = torch.randn(t, h, generator=gen, device="cuda", dtype=torch.bfloat16)
                _, _, _, offs = grouping(logits, k)
                sizes = torch.diff(offs, prepend=offs.new_zeros(1)).tolist()
                active = sum(1 for n in sizes if n)
                copies = max(1, min(MAX_COPIES, math.ceil(L2_BYTES / (active * expert_bytes(h, i, "w4a16")))))
                w13 = [torch.empty(e, 2 * i, h, device="cuda", dtype=torch.bfloat16).normal_(0, 0.02, generator=gen)
                       for _ in range(copies)]
                w2 = [torch.empty(e, h, i, device="cuda", dtype=torch.bfloat16).normal_(0, 0.02, generator=gen)
                      for _ in range(copies)]
                pairs = list(zip(w13, w2))
                t_grouped = graph_time([lambda a=a, b=b: bf16_block(x, logits, a, b, k) for a, b in pairs], replays=10)
                t_loop = graph_time([lambda a=a, b=b: bf16_block(x, logits, a, b, k, sizes) for a, b in pairs],
                                    replays=10)
                del w13, w2, pairs
                torch.cuda.empty_cache()
                nbytes = active * expert_bytes(h, i, "w4a16")
                sol = ceil.sol_seconds(nbytes, 2 * t * k * 3 * h * i)
                for mode in modes:
                    moes = [random_moe(h, i, e, k, mode, gen) for _ in range(copies)]
                    t_ours = graph_time([lambda m=m: m(x, logits) for m in moes], replays=10)
                    t_parts = parts_time(moes, x, logits, e) if parts else None
                    del moes
                    torch.cuda.empty_cache()
                    row = dict(model=model, routing=routing, t=t, mode=mode, active=active, us=t_ours * 1e6,
                               grouped_us=t_grouped * 1e6, speedup=t_grouped / t_ours, loop_us=t_loop * 1e6,
                               loop_speedup=t_loop / t_ours, sol=sol / t_ours)
                    rows.append(row)
                    print(f"{model:>14} {routing:>8} {t:>5} {mode:>6} {active:>6} {row['us']:9.1f} "
                          f"{row['grouped_us']:9.1f} {row['speedup']:7.2f}x {row['loop_us']:9.1f} "
                          f"{row['loop_speedup']:7.2f}x {row['sol']:6.2f}")
                    if t_parts:
                        row["parts_us"] = {name: v * 1e6 for name, v in t_parts.items()}
                        print(f"{'':>14} {'':>8} {'':>5} {mode:>6} parts us: "
                              + ", ".join(f"{name} {v:.1f}" for name, v in row["parts_us"].items()))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(device=ceil.device, bandwidth=ceil.bandwidth, fp16_rate=ceil.fp16_rate, rows=rows), f,
                      indent=1)
    plt = pyplot() if png_path else None
    if plt is not None:
        fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 5), squeeze=False)
        for ax, model in zip(axes[0], models):
            for routing in routings:
                for mode in modes:
                    pts = [(r["t"], r["speedup"]) for r in rows if r["model"] == model and r["routing"] == routing
                           and r["mode"] == mode]
                    ax.plot(*zip(*pts), marker="o", label=f"{mode}, {routing} routing")
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens T")
            ax.set_ylabel("speedup over bf16 torch._grouped_mm")
            ax.set_title(f"{model} experts, {ceil.device}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png_path, dpi=120)
        print(f"wrote {png_path}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--t", default=",".join(map(str, TOKENS)), help="token counts, comma-separated")
    ap.add_argument("--routing", nargs="+", choices=ROUTINGS, default=list(ROUTINGS))
    ap.add_argument("--mode", nargs="+", choices=("w4a4", "w4a16"), default=["w4a4", "w4a16"])
    ap.add_argument("--parts", action="store_true", help="also time each op of our block alone")
    ap.add_argument("--json")
    ap.add_argument("--png")
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.t.split(",")]
    except ValueError:
        ap.error(f"--t takes comma-separated integers, got {args.t!r}")
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        ap.error("needs a CUDA GPU and a CUDA build of nvfp4_kernels")
    run(args.model, tokens, args.routing, args.mode, args.json, args.png, args.parts)


if __name__ == "__main__":
    main()
