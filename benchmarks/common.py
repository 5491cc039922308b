"""Timing helpers of the benchmarks. The ceilings, L2 eviction and the kernel
timer live in nvfp4_kernels.timing (shared with nvfp4_kernels.gpumode.eval)."""

from __future__ import annotations

import statistics
import time
import warnings

import torch

from nvfp4_kernels.timing import SLEEP_CYCLES, Ceilings, L2Flush, cuda_time, geomean, measure_ceilings  # noqa: F401


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


def kernel_time(fn, arg_sets, *, flush: L2Flush, match: str, reps=50) -> float:
    """Median seconds of one call's GPU kernels whose names contain `match`, as
    the profiler (CUPTI) records them: the kernels' own run, without the launch
    latency that events around a single call include (~3.6 us on an H200).
    Inputs rotate over arg_sets, L2 flushed before each call. nan if no kernel
    matched."""
    from torch.profiler import ProfilerActivity, profile

    for args in arg_sets[:3]:
        fn(*args)
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for r in range(reps):
                flush()
                torch.cuda._sleep(SLEEP_CYCLES)
                fn(*arg_sets[r % len(arg_sets)])
            torch.cuda.synchronize()
        events = prof.events()
    us = [e.time_range.elapsed_us() for e in events if match in e.name]
    return statistics.median(us) / 1e6 if us else float("nan")


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


def pyplot():
    """matplotlib.pyplot with a file backend, or None (and a note) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG")
        return None
    return plt


def graph_time(calls, replays=20) -> float:
    """Median GPU seconds per call: the chain captured once in a CUDA graph, replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for c in calls[:2]:
            c()  # warm-up (allocator, first-launch work) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / len(calls))
    del graph
    return statistics.median(samples)
