"""SM clock and board power under sustained load: our gemm against cuBLAS fp16.

    python3 tools/clocks.py [MxNxK ...]        (default 8192x8192x8192 4096x4096x4096)

For each shape, runs the NVFP4 gemm and torch.matmul on fp16 operands of the
same M, N, K for ~3 s each while `nvidia-smi -lms 20` samples the SM clock,
the power draw and the active clock-event (throttle) reasons; prints the
medians over the loaded samples and each one's TFLOP/s (calls per second
times the flops; "+flush" rows put an L2 read sweep before every call, as the
benchmarks do, and count the sweep's time too). A kernel that is
slower than its instruction count suggests may simply run at a lower clock
than cuBLAS does (power): then its per-cycle rate is the fairer comparison.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

import nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand
from nvfp4_kernels.timing import L2Flush

FIELDS = "clocks.sm,power.draw,clocks_event_reasons.active"


def sampled(fn, seconds=3.0):
    """Run fn() for `seconds` (after 0.5 s of warm-up) under nvidia-smi sampling;
    returns (calls per second, [(mhz, watts, reasons)])."""
    t_end = time.time() + 0.5
    while time.time() < t_end:
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits", "-lms", "20"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.2)
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            fn()
        n += 10
        torch.cuda.synchronize()
    dt = time.time() - t0
    smi.terminate()
    out, _ = smi.communicate()
    rows = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            rows.append((float(f[0]), float(f[1]), f[2]))
        except (ValueError, IndexError):
            pass
    return n / dt, rows[3:-3] if len(rows) > 8 else rows


def report(name, flops, rate, rows, per_cycle=True):
    """per_cycle=False where the rate counts other work (the sweeps) too."""
    mhz = statistics.median(r[0] for r in rows) if rows else float("nan")
    watts = statistics.median(r[1] for r in rows) if rows else float("nan")
    reasons = sorted({r[2] for r in rows})
    tf = flops * rate / 1e12
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cyc = f"{tf * 1e12 / (mhz * 1e6) / sms:7.0f}" if per_cycle else f"{'-':>7}"
    print(f"{name:<28} {tf:7.1f} TFLOP/s  {mhz:6.0f} MHz  {watts:6.0f} W  {cyc} FLOP/cycle/SM"
          f"  reasons {','.join(reasons)}", flush=True)


def main(argv):
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv] or [(8192, 8192, 8192), (4096, 4096, 4096)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}")
    flush = L2Flush()
    for m, n, k in shapes:
        a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
        b = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
        out = torch.empty(m, n, dtype=torch.float16, device="cuda")
        flops = 2 * m * n * k
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        ours = lambda: nk.gemm(a.data, b.data, a.sf, b.sf, out=out)  # noqa: E731
        theirs = lambda: torch.matmul(x, w.t())  # noqa: E731
        for name, fn in (("nvfp4 gemm", ours), ("cuBLAS fp16", theirs)):
            rate, rows = sampled(fn)
            report(f"{name} {m}x{n}x{k}", flops, rate, rows)
            rate, rows = sampled(lambda: (flush(), fn()))
            report(f"{name} +flush", flops, rate, rows, per_cycle=False)
        del a, b, out, x, w


if __name__ == "__main__":
    main(sys.argv[1:])
