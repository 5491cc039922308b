"""The linear layers of real models, NVFP4 (W4A4 and W4A16) against bf16, at every token count.

    python -m benchmarks.bench_models [--model 8b 70b qwen2.5-7b qwen3-8b qwen3-32b] [--m 1,16,256]
        [--mode w4a4 w4a4t w4a16 w4a16p w4a16t] [--json F] [--png F]

Per model, the four linears of one decoder layer: qkv, o, gate+up (one dual gemm: silu(x Wg^T) *
(x Wu^T)) and down. W4A4 runs as a model runs it: gemm_w4a4, the activations' quantization and the
gemm of them (both timed; w4a4t: the weights laid out by tile, layouts.to_expert_tiles, as NVFP4Linear
holds them on a GPU); W4A16 is one call on the bf16 activations (w4a16p: with the weights repacked for bf16,
ops.pack_bf16_pairs; w4a16t: those laid out by tile too, layouts.to_expert_tiles). bf16 is F.linear (and silu * mul
for the dual)
in the same run. GPU time per call from CUDA-graph replays of a chain of calls that walks over
enough copies of the weights to exceed L2 (so every call reads its weights from DRAM, as a model's
layers do); median of replays. Speed of light (SOL) = max(bytes / copy rate, flops / fp16 tensor
rate), both measured in this run; bytes = the weights' (NVFP4: K/2 + K/16 per row) + x (bf16) +
the output (bf16). The "layer" rows add the four linears: the time a model spends.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import nvfp4_kernels as nk

from .common import graph_time, measure_ceilings, pyplot

# (name, N, K, dual): N of each half for the dual. 8b and 70b are Llama-3.1's (Mistral-7B's are 8b's).
MODELS = {
    "8b": [("qkv", 6144, 4096, False), ("o", 4096, 4096, False), ("gate_up", 14336, 4096, True),
           ("down", 4096, 14336, False)],
    "70b": [("qkv", 10240, 8192, False), ("o", 8192, 8192, False), ("gate_up", 28672, 8192, True),
            ("down", 8192, 28672, False)],
    "qwen2.5-7b": [("qkv", 4608, 3584, False), ("o", 3584, 3584, False), ("gate_up", 18944, 3584, True),
                   ("down", 3584, 18944, False)],
    "qwen3-8b": [("qkv", 6144, 4096, False), ("o", 4096, 4096, False), ("gate_up", 12288, 4096, True),
                 ("down", 4096, 12288, False)],
    "qwen3-32b": [("qkv", 10240, 5120, False), ("o", 5120, 8192, False), ("gate_up", 25600, 5120, True),
                  ("down", 5120, 25600, False)],
}
TITLES = {"8b": "Llama-3.1-8B", "70b": "Llama-3.1-70B", "qwen2.5-7b": "Qwen2.5-7B", "qwen3-8b": "Qwen3-8B",
          "qwen3-32b": "Qwen3-32B"}
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
L2_BYTES = 4 * 60 * 2**20  # weights walked per chain: several times an H100 / H200 L2


def weight_bytes(n, k, mode):
    return n * k * 2 if mode == "bf16" else n * (k // 2 + k // 16)


def nvfp4_weight(n, k, gen, mode="w4a4"):
    w = torch.randn(n, k, generator=gen, device="cuda", dtype=torch.bfloat16) * 0.02
    g = 2688.0 / w.abs().amax().float()
    codes, sf = nk.quantize(w, global_scale=g)
    if mode in ("w4a16t", "w4a4t"):
        words = nk.pack_bf16_pairs(codes) if mode == "w4a16t" else codes
        return (*nk.layouts.to_expert_tiles(words[None], sf[None]), (1.0 / g).reshape(1))
    return nk.pack_bf16_pairs(codes) if mode == "w4a16p" else codes, sf, (1.0 / g).reshape(1)


def make_calls(mode, m, n, k, dual, gen):
    """A list of zero-argument calls, one per copy of the weights (copies enough to pass L2)."""
    per = weight_bytes(n, k, mode) * (2 if dual else 1)
    copies = max(2, -(-L2_BYTES // per))
    x = torch.randn(m, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    calls = []
    for _ in range(copies):
        if mode == "bf16":
            ws = [torch.randn(n, k, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2 if dual else 1)]
            if dual:
                calls.append(lambda w1=ws[0], w2=ws[1]: F.silu(F.linear(x, w1)) * F.linear(x, w2))
            else:
                calls.append(lambda w=ws[0]: F.linear(x, w))
            continue
        ws = [nvfp4_weight(n, k, gen, mode) for _ in range(2 if dual else 1)]
        if mode.startswith("w4a16"):
            if dual:
                (c1, s1, a1), (c2, s2, a2) = ws
                calls.append(lambda c1=c1, s1=s1, a1=a1, c2=c2, s2=s2, a2=a2:
                             nk.dual_gemm_w4a16(x, c1, c2, s1, s2, alpha1=a1, alpha2=a2))
            else:
                (c, s, a), = ws
                calls.append(lambda c=c, s=s, a=a: nk.gemm_w4a16(x, c, s, alpha=a))
            continue
        # w4a4: the activations quantized in the call, as a layer does (a calibrated input scale)
        gx = torch.tensor([2688.0], device="cuda") / x.abs().amax().float()
        if dual:
            (c1, s1, a1), (c2, s2, a2) = ws

            def call(c1=c1, s1=s1, a1=a1 / gx, c2=c2, s2=s2, a2=a2 / gx):
                return nk.dual_gemm_w4a4(x, c1, c2, s1, s2, global_scale=gx, alpha1=a1, alpha2=a2)
        else:
            (c, s, a), = ws

            def call(c=c, s=s, a=a / gx):
                return nk.gemm_w4a4(x, c, s, global_scale=gx, alpha=a)
        calls.append(call)
    return calls


def kernel_of(mode, m, n, k, dual, gen):
    if mode == "bf16":
        return "cuBLAS"
    c, s, _ = nvfp4_weight(n, k, gen, mode)
    if mode.startswith("w4a16"):
        x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
        return nk.kernel_name("dual_gemm_w4a16", x, c, c, s, s) if dual else nk.kernel_name("gemm_w4a16", x, c, s)
    x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    return nk.kernel_name("dual_gemm_w4a4", x, c, c, s, s) if dual else nk.kernel_name("gemm_w4a4", x, c, s)


def run(models, tokens, modes, json_path=None, png_path=None):
    ceil = measure_ceilings()
    print(f"{ceil.device}: copy {ceil.bandwidth / 1e12:.2f} TB/s, fp16 mma {ceil.fp16_rate / 1e12:.0f} TFLOP/s "
          "(this run's ceilings)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"{'model':>5} {'layer':>8} {'M':>5} {'mode':>6} {'us':>9} {'bf16 us':>9} {'speedup':>8} {'SOL':>6}  kernel")
    for model in models:
        for m in tokens:
            total = {mode: 0.0 for mode in ("bf16", *modes)}
            sol_total = {mode: 0.0 for mode in modes}
            for name, n, k, dual in MODELS[model]:
                t = {}
                for mode in ("bf16", *modes):
                    t[mode] = graph_time(make_calls(mode, m, n, k, dual, gen))
                    total[mode] += t[mode]
                    torch.cuda.empty_cache()
                for mode in modes:
                    halves = 2 if dual else 1
                    nbytes = weight_bytes(n, k, mode) * halves + 2 * m * k + 2 * m * n
                    sol = ceil.sol_seconds(nbytes, 2 * m * n * k * halves)
                    sol_total[mode] += sol
                    row = dict(model=model, layer=name, m=m, n=n, k=k, dual=dual, mode=mode, us=t[mode] * 1e6,
                               bf16_us=t["bf16"] * 1e6, speedup=t["bf16"] / t[mode], sol=sol / t[mode],
                               kernel=kernel_of(mode, m, n, k, dual, gen))
                    rows.append(row)
                    print(f"{model:>5} {name:>8} {m:>5} {mode:>6} {row['us']:9.1f} {row['bf16_us']:9.1f} "
                          f"{row['speedup']:7.2f}x {row['sol']:6.2f}  {row['kernel']}")
            for mode in modes:
                row = dict(model=model, layer="layer", m=m, mode=mode, us=total[mode] * 1e6,
                           bf16_us=total["bf16"] * 1e6, speedup=total["bf16"] / total[mode],
                           sol=sol_total[mode] / total[mode], kernel="")
                rows.append(row)
                print(f"{model:>5} {'layer':>8} {m:>5} {mode:>6} {row['us']:9.1f} {row['bf16_us']:9.1f} "
                      f"{row['speedup']:7.2f}x {row['sol']:6.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(device=ceil.device, bandwidth=ceil.bandwidth, fp16_rate=ceil.fp16_rate, rows=rows), f,
                      indent=1)
    plt = pyplot() if png_path else None
    if plt is not None:
        fig, axes = plt.subplots(1, len(models), figsize=(7 * len(models), 5), squeeze=False)
        for ax, model in zip(axes[0], models):
            for layer in [x[0] for x in MODELS[model]] + ["layer"]:
                for mode in modes:
                    pts = [(r["m"], r["speedup"]) for r in rows if r["model"] == model and r["layer"] == layer
                           and r["mode"] == mode]
                    ax.plot(*zip(*pts), marker="o", label=f"{layer} {mode}", lw=2.5 if layer == "layer" else 1)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens M")
            ax.set_ylabel("speedup over bf16 F.linear")
            ax.set_title(f"{TITLES[model]} linears, {ceil.device}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png_path, dpi=120)
        print(f"wrote {png_path}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", nargs="+", choices=list(MODELS), default=["8b", "70b"])
    ap.add_argument("--m", default=",".join(map(str, TOKENS)), help="token counts, comma-separated")
    ap.add_argument("--mode", nargs="+", choices=("w4a4", "w4a4t", "w4a16", "w4a16p", "w4a16t"),
                    default=["w4a4", "w4a16", "w4a16p"])
    ap.add_argument("--json")
    ap.add_argument("--png")
    args = ap.parse_args(argv)
    try:
        tokens = [int(t) for t in args.m.split(",")]
    except ValueError:
        ap.error(f"--m takes comma-separated integers, got {args.m!r}")
    if not torch.cuda.is_available() or not nk.WITH_CUDA:
        ap.error("needs a CUDA GPU and a CUDA build of nvfp4_kernels")
    run(args.model, tokens, args.mode, args.json, args.png)


if __name__ == "__main__":
    main()
