"""The four ops on the competition shapes: each checked against the exact
reference, then timed. This is the project's main job (README: `make demo`).

    python -m benchmarks.competition [--problem P ...] [--shapes benchmarks|tests] [--json FILE] [--no-bf16]
    python -m benchmarks.competition --groups 80,176,64x4096x7168 ...   (grouped gemm of these sizes only)

On a GPU (default: the task.yml benchmark shapes), per shape:
  t_call  GPU time of one submission.custom_kernel call after an L2 eviction (read sweep), median
  host    host time per custom_kernel call (Python, dispatch, launch), median
  t_loop  50 different inputs back to back after the harness's L2 fill, per call (the
          gemm/dual/group procedure: includes host time wherever it exceeds the GPU's, and the
          write-back of the fill's dirty lines)
  sol     speed of light from the ceilings measured in this run; frac = sol / t
  bf16    cuBLAS on operands pre-dequantized to bf16 (exact), same flush; speedup = bf16 / t_call,
          and in brackets bf16 / sol: the speedup a kernel at the speed of light would have
On the CPU (default: the task.yml test shapes): one call each, wall time.
Inputs are full range (nvfp4_kernels.testing), not the harness's narrow ones.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import submission
from nvfp4_kernels import reference
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.layouts import batch_first
from nvfp4_kernels.gpumode.harness import competition_inputs, competition_reference
from nvfp4_kernels.testing import TOL, within_tolerance

from .common import L2Flush, cpu_time, cuda_time, cuda_time_loop, host_time, measure_ceilings

LOOP_INPUTS = 50


def work(problem: str, shape: dict):
    """(bytes moved at least once, flops) of one call."""
    if problem == "group_gemm":
        sizes = list(zip(shape["m"], shape["n"], shape["k"], [1] * len(shape["m"])))
    else:
        sizes = [(shape["m"], 1 if problem == "gemv" else shape["n"], shape["k"], shape["l"])]
    nbytes = flops = 0
    operands = 3 if problem == "dual_gemm" else 2
    for m, n, k, L in sizes:
        b_rows = n * (operands - 1)
        nbytes += L * ((m + b_rows) * k * 9 // 16 + m * n * 2)  # fp4 + e4m3 per 16, fp16 out
        flops += 2 * L * m * n * k * (operands - 1)
    return nbytes, flops


def describe(problem, shape):
    if problem == "group_gemm":
        return f"G={len(shape['m'])} M={shape['m']} N={shape['n'][0]} K={shape['k'][0]}"
    n = "" if problem == "gemv" else f" N={shape['n']}"
    return f"M={shape['m']}{n} K={shape['k']} L={shape['l']}"


def bf16_baseline(problem, data):
    """A callable and its args: the same math through cuBLAS on bf16 copies."""
    deq = lambda x, s: reference.dequantize(batch_first(x), batch_first(s)).to(torch.bfloat16)  # noqa: E731
    if problem == "group_gemm":
        abc, sf, _, _ = data
        ops = [(deq(a, sa.to(a.device)), deq(b, sb.to(a.device))) for (a, b, _), (sa, sb) in zip(abc, sf)]
        return (lambda ops: [a @ b.transpose(-1, -2) for a, b in ops]), (ops,)
    if problem == "dual_gemm":
        a, b1, b2 = deq(data[0], data[3]), deq(data[1], data[4]), deq(data[2], data[5])

        def dual(a, b1, b2):
            return (torch.nn.functional.silu((a @ b1.transpose(-1, -2)).float()) * (a @ b2.transpose(-1, -2))).half()

        return dual, (a, b1, b2)
    a, b = deq(data[0], data[2]), deq(data[1], data[3])
    if problem == "gemv":
        b = b[:, :1]
    return (lambda a, b: a @ b.transpose(-1, -2)), (a, b)


def check(problem, data):
    out = submission.custom_kernel(data)
    ref = competition_reference(problem, data)
    outs, refs = (out, ref) if problem == "group_gemm" else ([out], [ref])
    worst, ok = 0.0, True
    for o, r in zip(outs, refs):
        ok = ok and bool(within_tolerance(o, r).all())
        o, r = o.double().cpu(), r.double().cpu()
        fin = ~torch.isnan(r)
        err = ((o - r).abs() / (TOL + TOL * r.abs()))[fin]  # error in units of the tolerance
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
    return ok, worst


def group_shape(text: str) -> dict:
    """'M1,M2,...xNxK' -> a group_gemm shape dict (every group N x K)."""
    try:
        ms, n, k = text.split("x")
        m = [int(v) for v in ms.split(",")]
        n, k = int(n), int(k)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M1,M2,...xNxK, got {text!r}") from None
    return {"m": m, "n": [n] * len(m), "k": [k] * len(m), "g": len(m)}


def run(problems, which, json_path=None, bf16=True, groups=None):
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    ceil = measure_ceilings() if cuda else None
    flush = L2Flush() if cuda else None  # read sweep: kernel time against SOL
    harness_flush = L2Flush(mode="write") if cuda else None  # the harness's fill, for t_loop
    print(f"device: {torch.cuda.get_device_name() if cuda else 'CPU'}; torch {torch.__version__}")
    if ceil:
        print(f"ceilings: copy {ceil.bandwidth / 1e12:.2f} TB/s, fp16 matmul {ceil.fp16_rate / 1e12:.0f} TFLOP/s")
    rows = []
    for problem in problems:
        for i, shape in enumerate(groups if groups else tasks.shapes(problem)[which]):
            data = competition_inputs(problem, shape, seed=1000 + i, device=device)
            ok, worst = check(problem, data)
            row = {"problem": problem, "shape": describe(problem, shape), "ok": ok, "worst_err_over_tol": worst}
            nbytes, flops = work(problem, shape)
            if cuda:
                inputs = [data] + [competition_inputs(problem, shape, seed=2000 + j, device=device)
                                   for j in range(LOOP_INPUTS - 1)]
                sol = ceil.sol_seconds(nbytes, flops)
                t_call = cuda_time(submission.custom_kernel, [(d,) for d in inputs], flush=flush)
                t_loop = cuda_time_loop(submission.custom_kernel, [(d,) for d in inputs], flush=harness_flush)
                t_host = host_time(submission.custom_kernel, [(d,) for d in inputs])
                t_bf16 = float("nan")
                if bf16:
                    fn, args = bf16_baseline(problem, data)
                    t_bf16 = cuda_time(fn, [args], flush=flush, reps=30)
                row.update(t_call_us=t_call * 1e6, t_loop_us=t_loop * 1e6, host_us=t_host * 1e6, sol_us=sol * 1e6,
                           frac_sol=sol / t_call,
                           frac_sol_loop=sol / t_loop, bf16_us=t_bf16 * 1e6, speedup=t_bf16 / t_call,
                           speedup_at_sol=t_bf16 / sol,
                           tflops=flops / t_call / 1e12, gbps=nbytes / t_call / 1e9)
                del inputs
            else:
                row.update(t_call_us=cpu_time(submission.custom_kernel, [(data,)]) * 1e6)
            rows.append(row)
            print(format_row(row, cuda), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": ceil.device if ceil else "cpu", "ceilings": ceil.__dict__ if ceil else None,
                       "rows": rows}, f, indent=1)
    return rows


def format_row(r, cuda):
    head = f"{r['problem']:<10} {r['shape']:<58} {'ok  ' if r['ok'] else 'FAIL'}"
    if not cuda:
        return f"{head} {r['t_call_us'] / 1e3:10.1f} ms (CPU)"
    return (f"{head} {r['t_call_us']:8.1f} us SOL {r['sol_us']:6.1f} frac {r['frac_sol']:.2f} "
            f"loop {r['t_loop_us']:7.1f} ({r['frac_sol_loop']:.2f}) host {r['host_us']:5.1f}  bf16 {r['bf16_us']:7.1f} "
            f"x{r['speedup']:.2f} (at SOL x{r['bf16_us'] / r['sol_us']:.2f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", nargs="*", default=list(tasks.PROBLEMS), choices=tasks.PROBLEMS)
    ap.add_argument("--shapes", choices=("benchmarks", "tests"), default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-bf16", action="store_true", help="skip the cuBLAS bf16 comparison (A/B runs)")
    ap.add_argument("--groups", nargs="+", type=group_shape, metavar="M1,M2,...xNxK",
                    help="grouped gemm of these group sizes only (instead of the task's shapes)")
    args = ap.parse_args(argv)
    which = args.shapes or ("benchmarks" if torch.cuda.is_available() else "tests")
    problems = ["group_gemm"] if args.groups else args.problem
    rows = run(problems, which, args.json, bf16=not args.no_bf16, groups=args.groups)
    failed = [r for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
