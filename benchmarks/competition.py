"""The four ops on the competition shapes: each checked against the exact
reference, then timed. This is the project's main job (README: `make demo`).

    python -m benchmarks.competition [--problem P ...] [--shapes benchmarks|tests] [--json FILE] [--no-bf16]
    python -m benchmarks.competition --groups 80,176,64x4096x7168 ...   (grouped gemm of these sizes only)

One row per shape: problem, shape (M x N x K and the batch L; gemv has N = 1;
group gemm lists every group's M x N x K, or [M, ...] x N x K when the groups
share N and K), check (ok / FAIL against the competition's tolerance
|out - ref| <= 1e-3 + 1e-3 |ref|), the times below, and the error against the
exact reference: err/tol = max |out - ref| / (1e-3 + 1e-3 |ref|), the fraction
of the tolerance used (a pass is <= 1), and max|err| = max |out - ref|. A total
line ends the run: rows checked, how many failed, the time.

On a GPU (default: the task.yml benchmark shapes), per shape:
  t_call  GPU time of one submission.custom_kernel call after an L2 eviction (read sweep), median
  host    host time per custom_kernel call (Python, dispatch, launch), median
  t_loop  50 different inputs back to back after the harness's L2 fill, per call (the
          gemm/dual/group procedure: includes host time wherever it exceeds the GPU's, and the
          write-back of the fill's dirty lines)
  sol     speed of light from the ceilings measured in this run; frac = sol / t
  bf16    cuBLAS on operands pre-dequantized to bf16 (exact), same flush; speedup = bf16 / t_call,
          and in brackets bf16 / sol: the speedup a kernel at the speed of light would have
On the CPU (default: the task.yml test shapes, which keep a 2-core machine
under a minute and a half): one call each, its wall time.
Inputs are full range (nvfp4_kernels.testing), not the harness's narrow ones.
The competition's contract: docs/competition.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

import submission
from nvfp4_kernels import reference
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.gpumode.harness import competition_inputs, competition_reference
from nvfp4_kernels.layouts import batch_first
from nvfp4_kernels.testing import TOL, within_tolerance

from .common import L2Flush, cuda_time, cuda_time_loop, host_time, measure_ceilings

LOOP_INPUTS = 50
SHAPE_TITLE = "shape (MxNxK, batch L; G groups)"


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


def describe(problem, shape) -> str:
    """The shape, compactly: MxNxK and L; for group gemm every group's MxNxK."""
    if problem == "group_gemm":
        ms, ns, ks = shape["m"], shape["n"], shape["k"]
        if len(set(ns)) == 1 and len(set(ks)) == 1:
            sizes = f"[{','.join(map(str, ms))}]x{ns[0]}x{ks[0]}"
        else:
            sizes = " ".join(f"{m}x{n}x{k}" for m, n, k in zip(ms, ns, ks))
        return f"G={len(ms)} {sizes}"
    n = 1 if problem == "gemv" else shape["n"]
    return f"{shape['m']}x{n}x{shape['k']} L={shape['l']}"


def bf16_baseline(problem, data):
    """A callable and its args: the same math through cuBLAS on bf16 copies."""
    deq = lambda x, s: reference.dequantize(batch_first(x), batch_first(s)).to(torch.bfloat16)
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


def _worse(a: float, b: float) -> float:
    """The larger of two errors; NaN (an output NaN where the reference is a number) wins."""
    return b if math.isnan(b) or b > a else a


def check(problem, data, out):
    """(within tolerance, max |out - ref| / (TOL + TOL |ref|), max |out - ref|) of
    custom_kernel's output against the exact reference. The errors are taken
    where the reference is finite; NaN placement is part of `ok` only."""
    ref = competition_reference(problem, data)
    outs, refs = (out, ref) if problem == "group_gemm" else ([out], [ref])
    ok, err_tol, err_abs = True, 0.0, 0.0
    for o, r in zip(outs, refs):
        ok = ok and bool(within_tolerance(o, r).all())
        o, r = o.double().cpu(), r.double().cpu()
        fin = torch.isfinite(r)
        diff, r = (o - r).abs()[fin], r[fin]
        if diff.numel():
            err_abs = _worse(err_abs, float(diff.max()))
            err_tol = _worse(err_tol, float((diff / (TOL + TOL * r.abs())).max()))
    return ok, err_tol, err_abs


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
    t_start = time.perf_counter()
    # (problem, index of the shape within its problem: the inputs' seed, shape)
    jobs = [(p, i, s) for p in problems for i, s in enumerate(groups if groups else tasks.shapes(p)[which])]
    shape_width = max(len(describe(p, s)) for p, _, s in jobs)
    ceil = measure_ceilings() if cuda else None
    flush = L2Flush() if cuda else None  # read sweep: kernel time against SOL
    harness_flush = L2Flush(mode="write") if cuda else None  # the harness's fill, for t_loop
    print(f"device: {torch.cuda.get_device_name() if cuda else 'CPU'}; torch {torch.__version__}")
    if ceil:
        print(f"ceilings: copy {ceil.bandwidth / 1e12:.2f} TB/s, fp16 matmul {ceil.fp16_rate / 1e12:.0f} TFLOP/s")
    print(shapes_line(which, cuda, groups))
    print("err/tol = max |out - ref| / (1e-3 + 1e-3 |ref|) against the exact reference (ok: <= 1); "
          "max|err| = max |out - ref|")
    print(header(cuda, shape_width), flush=True)
    rows = []
    for problem, i, shape in jobs:
        data = competition_inputs(problem, shape, seed=1000 + i, device=device)
        t0 = time.perf_counter()
        out = submission.custom_kernel(data)
        t_first = time.perf_counter() - t0  # the CPU's time column: its one call is the checked one
        ok, err_tol, err_abs = check(problem, data, out)
        row = {"problem": problem, "shape": describe(problem, shape), "sizes": shape, "ok": ok,
               "worst_err_over_tol": err_tol, "max_abs_err": err_abs}
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
            row.update(t_call_us=t_first * 1e6)
        rows.append(row)
        print(format_row(row, cuda, shape_width), flush=True)
    total = totals(rows, time.perf_counter() - t_start)
    print(total_line(total, cuda), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": ceil.device if ceil else "cpu", "ceilings": ceil.__dict__ if ceil else None,
                       "rows": rows, "total": total}, f, indent=1)
    return rows


def shapes_line(which, cuda, groups):
    if groups:
        what = "the group sizes given (--groups)"
    else:
        what = f"the task files' {'test' if which == 'tests' else 'benchmark'} shapes"
    if cuda:
        return f"shapes: {what}"
    default = " (the CPU's default; a GPU runs the benchmark shapes)" if which == "tests" and not groups else ""
    return f"shapes: {what}{default}, one call each, wall time"


def _cells(r, cuda):
    """(title, text) of the columns after problem, shape and check. The GPU's
    texts carry their own labels (dev/ab_summary.py parses "<t> us ... loop <t>")."""
    if not cuda:
        cells = [("time ms", f"{r['t_call_us'] / 1e3:10.1f}")]
    else:
        cells = [
            ("t_call us", f"{r['t_call_us']:8.1f} us"),
            ("SOL us", f" SOL {r['sol_us']:6.1f}"),
            ("frac", f" frac {r['frac_sol']:.2f}"),
            ("t_loop us (frac)", f" loop {r['t_loop_us']:7.1f} ({r['frac_sol_loop']:.2f})"),
            ("host us", f" host {r['host_us']:5.1f}"),
            ("bf16 us, speedup (at SOL)",
             f"  bf16 {r['bf16_us']:7.1f} x{r['speedup']:.2f} (at SOL x{r['bf16_us'] / r['sol_us']:.2f})"),
        ]
    return cells + [("err/tol", f"{r['worst_err_over_tol']:9.3f}"), ("max|err|", f"{r['max_abs_err']:10.2e}")]


# A row of typical numbers: its cells' widths are the header's.
_SAMPLE_ROW = {"t_call_us": 1.0, "sol_us": 1.0, "frac_sol": 1.0, "t_loop_us": 1.0, "frac_sol_loop": 1.0,
               "host_us": 1.0, "bf16_us": 1.0, "speedup": 1.0, "worst_err_over_tol": 0.0, "max_abs_err": 0.0}


def header(cuda, shape_width=0):
    cells = "".join(title.rjust(len(text)) for title, text in _cells(_SAMPLE_ROW, cuda))
    return f"{'problem':<10} {SHAPE_TITLE:<{max(shape_width, len(SHAPE_TITLE))}} {'check':<5}{cells}"


def format_row(r, cuda, shape_width=0):
    """One shape's line; shape_width: the longest shape of the run, so that the columns line up."""
    cells = "".join(text for _, text in _cells(r, cuda))
    status = "ok" if r["ok"] else "FAIL"
    return f"{r['problem']:<10} {r['shape']:<{max(shape_width, len(SHAPE_TITLE))}} {status:<5}{cells}"


def totals(rows, wall_s):
    failed = [f"{r['problem']} {r['shape']}" for r in rows if not r["ok"]]
    errs = [r["worst_err_over_tol"] for r in rows]
    worst = max(errs, key=lambda e: math.inf if math.isnan(e) else e, default=0.0)
    return {"rows": len(rows), "failed": failed, "worst_err_over_tol": worst,
            "op_s": sum(r["t_call_us"] for r in rows) / 1e6, "wall_s": wall_s}


def total_line(t, cuda):
    status = "all ok" if not t["failed"] else f"{len(t['failed'])} FAILED ({'; '.join(t['failed'])})"
    # On a GPU the rows' times are means per call, not the run's time: only the wall time adds up.
    calls = "" if cuda else f"calls {t['op_s']:.1f} s, "
    return (f"total: {t['rows']} rows checked, {status}; worst err/tol {t['worst_err_over_tol']:.3f}; "
            f"{calls}wall {t['wall_s']:.1f} s")


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
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
