"""Quantization benchmark: nvfp4.quantize against the memory-bandwidth speed of light.

    python -m benchmarks.bench_quantize [--json FILE] [--shapes 128x7168 4096x7168 ...] [--dtype bfloat16]

Per shape (rows x K, bfloat16 input unless --dtype says otherwise, linear and blocked
scales): the kernel's own time as the profiler records it (inputs rotated over >= 4x L2,
L2 flushed before each call), achieved GB/s, fraction of SOL (bytes read and written /
copy bandwidth measured in this run), and the time of one call between CUDA events
(launch latency included). Every output is first checked byte for byte against
reference.quantize.
"""

from __future__ import annotations

import argparse
import json

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference

from .common import L2Flush, cuda_time, kernel_time, measure_ceilings

# activations of a decode step and of prefill (M x K of the competition's gemms), and a weight
SHAPES = [(128, 7168), (512, 4096), (4096, 7168), (16384, 2048), (7168, 16384)]


def quantize_bytes(rows, k, elem=2):
    return rows * k * elem + rows * k // 2 + rows * k // 16


def run(shapes, json_path=None, dtype=torch.bfloat16):
    ceil = measure_ceilings()
    flush = L2Flush()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"device: {ceil.device}; torch {torch.__version__}; copy {ceil.bandwidth / 1e12:.2f} TB/s; input {dtype}")
    print(f"{'rows':>6} {'K':>6} {'layout':<8} {'kern us':>8} {'GB/s':>7} {'SOL us':>7} {'frac':>5} {'call us':>8}")
    rows_out = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for rows, k in shapes:
        nbytes = quantize_bytes(rows, k, dtype.itemsize)
        sets = max(2, min(16, -(-4 * l2 // nbytes)))
        xs = [torch.randn(rows, k, generator=gen, device="cuda").to(dtype) for _ in range(sets)]
        for layout in ("linear", "blocked"):
            got = nk.quantize(xs[0], global_scale=0.5, sf_layout=layout)
            want = reference.quantize(xs[0], 0.5, layout)
            ok = torch.equal(got[0], want[0]) and torch.equal(got[1].view(torch.uint8), want[1].view(torch.uint8))
            fn = lambda x: nk.quantize(x, global_scale=0.5, sf_layout=layout)  # noqa: E731
            args = [(x,) for x in xs]
            t_k = kernel_time(fn, args, flush=flush, match="quantize")
            t_c = cuda_time(fn, args, flush=flush)
            sol = nbytes / ceil.bandwidth
            print(f"{rows:>6} {k:>6} {layout:<8} {t_k * 1e6:>8.1f} {nbytes / t_k / 1e9:>7.0f} {sol * 1e6:>7.1f} "
                  f"{sol / t_k:>5.2f} {t_c * 1e6:>8.1f}{'' if ok else '  WRONG'}")
            rows_out.append(dict(rows=rows, k=k, layout=layout, kernel_s=t_k, call_s=t_c, sol_s=sol, ok=ok))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(device=ceil.device, copy_bytes_per_s=ceil.bandwidth, dtype=str(dtype), rows=rows_out), f,
                      indent=1)
    return rows_out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", metavar="ROWSxK", help="only these shapes")
    ap.add_argument("--json")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16", help="input type")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    results = run(shapes, args.json, getattr(torch, args.dtype))
    if not all(r["ok"] for r in results):
        raise SystemExit("some outputs differ from reference.quantize")


if __name__ == "__main__":
    main()
