"""Timing and ceilings shared by the benchmarks.

Ceilings are measured in the same run as the kernels (METHOD.md): a large
device-to-device copy (bytes read + written) and an 8192^3 fp16 matmul through
cuBLAS on random data. Speed of light of a problem = max(bytes / copy
bandwidth, flops / fp16 matmul rate): on Hopper e2m1 x e4m3 runs through fp16
tensor cores, so that is the rate our kernels can reach at best.
"""

from __future__ import annotations

import statistics
import time
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


def cuda_time(fn, arg_sets, *, flush: L2Flush | None, reps=100, warmup=5) -> float:
    """Median seconds of the GPU work of one call fn(*args), args rotating over
    arg_sets, L2 flushed before each timed call; events around the call only,
    the GPU kept busy while the host prepares it."""
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        if flush:
            flush()
        torch.cuda._sleep(SLEEP_CYCLES)
        starts[r].record()
        fn(*arg_sets[r % len(arg_sets)])
        ends[r].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3


def cuda_time_loop(fn, arg_sets, *, flush: L2Flush, reps=20) -> float:
    """The harness's procedure for gemm / dual / group: flush, then every input
    back to back between two events; one sample is elapsed / len(arg_sets).
    Host time per call shows whenever it exceeds the kernel's. Median sample."""
    for args in arg_sets[:3]:
        fn(*args)
    samples = []
    for _ in range(reps):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for args in arg_sets:
            fn(*args)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / len(arg_sets))
    return statistics.median(samples)


def host_time(fn, arg_sets, reps=200) -> float:
    """Median host seconds per call while the GPU is kept busy (launches queue up
    behind a long sleep, so no call waits for the GPU)."""
    fn(*arg_sets[0])
    torch.cuda.synchronize()
    samples = []
    for r in range(reps):
        if r % 50 == 0:
            torch.cuda._sleep(50 * SLEEP_CYCLES)
        t = time.perf_counter()
        fn(*arg_sets[r % len(arg_sets)])
        samples.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return statistics.median(samples)


def cpu_time(fn, arg_sets, reps=1) -> float:
    best = []
    for r in range(reps):
        t = time.perf_counter()
        fn(*arg_sets[r % len(arg_sets)])
        best.append(time.perf_counter() - t)
    return statistics.median(best)


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
