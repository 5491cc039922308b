"""Timing pieces shared by the benchmarks (benchmarks/) and the local GPU MODE
evaluation (nvfp4_kernels.gpumode.eval): the two measured ceilings, L2
eviction, a kernel timer and the geometric mean.

Ceilings are measured in the same run as the kernels: a large device-to-device
copy (bytes read + written) and an 8192^3 fp16 matmul through cuBLAS on random
data. Speed of light of a problem = max(bytes / copy bandwidth, flops / fp16
matmul rate): on Hopper e2m1 x e4m3 runs through fp16 tensor cores, so that is
the rate our kernels can reach at best.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import torch


@dataclass
class Ceilings:
    bandwidth: float  # bytes / s, device memory, read + write counted
    fp16_rate: float  # flop / s, dense fp16 tensor cores (cuBLAS, 8192^3)
    device: str

    def sol_seconds(self, nbytes: float, flops: float) -> float:
        return max(nbytes / self.bandwidth, flops / self.fp16_rate)


class L2Flush:
    """Evicts L2 before a timed call by sweeping a buffer twice its size.

    mode "read" (kernel times against SOL): a read sweep leaves clean lines, so the
    timed kernel pays only for its own traffic. mode "write" (the harness's way, a
    large fill): leaves ~L2-size of dirty lines that the next kernel writes back
    to DRAM while it runs; on an H200 that added ~14 us to every memory-bound time
    (60 MB of write-back), to cuBLAS's as much as to ours (2026-11-22)."""

    def __init__(self, device="cuda", mode="read"):
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.buf = torch.ones(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device=device)
        self.sink = torch.empty((), dtype=torch.int64, device=device)
        self.mode = mode

    def __call__(self):
        if self.mode == "write":
            self.buf.fill_(0x5A5A5A5A)
        else:
            torch.sum(self.buf, dim=0, out=self.sink)


# GPU time queued after each flush, so that the host has launched the timed call
# before the start event fires: without it the host's time per call (Python,
# dispatch, launch: tens of microseconds) showed up as idle GPU time between the
# events whenever it exceeded the flush (a constant ~15 us on every gemv time,
# and on cuBLAS's; seen on an H200, 2026-11-22).
SLEEP_CYCLES = 400_000  # ~200 us at 2 GHz


def cuda_time(fn, arg_sets, *, flush: L2Flush | None, reps=100, warmup=5, sleep=SLEEP_CYCLES, before=None) -> float:
    """Median seconds of the GPU work of one call fn(*args), args rotating over
    arg_sets, L2 flushed before each timed call; events around the call only,
    the GPU kept busy (a sleep of `sleep` cycles) while the host prepares it.
    `before(args)`, if given, runs after the flush (probes: tools/cold_probe.py)."""
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        args = arg_sets[r % len(arg_sets)]
        if flush:
            flush()
        if before:
            before(args)
        torch.cuda._sleep(sleep)
        starts[r].record()
        fn(*args)
        ends[r].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3


def measure_ceilings(device="cuda") -> Ceilings:
    name = torch.cuda.get_device_name(device)
    flush = L2Flush(device)
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    copy_s = cuda_time(lambda: dst.copy_(src), [()], flush=flush, reps=20)
    del src, dst
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    mm_s = cuda_time(lambda: torch.mm(a, b), [()], flush=None, reps=20)
    return Ceilings(bandwidth=2 * (1 << 30) / copy_s, fp16_rate=2 * n**3 / mm_s, device=name)


def geomean(xs) -> float:
    """Geometric mean (the competition's score over shapes); nan for no values."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
