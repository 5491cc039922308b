"""What one cold gemm call's time depends on, besides its kernel's code
(development probe, session 45). Run where the extension is built, or in a
variant's copy as tools/bench_ab.sh does (`python3 $ROOT/tools/cold_probe.py`):

    python3 tools/cold_probe.py [MxNxK ...]

Per shape it prints the kernels one call launches (profiler trace: name, grid,
block), then the median of 60 cold calls, us, by procedure. "event" is
bench_gemm's (L2 read sweep, a GPU sleep of ~200 us, event, one call, event),
inputs rotating over S sets; each further column changes one thing:
- S=1: one input set, as tools/trace.cu times;
- kernel: the profiler's kernel duration instead of events (no launch);
- touched: one byte per 64 KB of the call's operands read after the sweep
  (their page translations fetched, ~0.2% of their lines in L2);
- sleep 10 / 50 / 800: the sleep before the start event, us;
- trace data: tools/trace.cu's operand values (uniform code bytes, scale
  bytes 0x28..0x47) instead of random_operand's.
On an H100 (session 45) none of them moved a time by more than its rounds
spread (up to ~1 us); what set the gap between this procedure and
tools/trace.cu's was the SMs' instruction caches (`TRACE_PRE=icache` there).
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings

import torch

import nvfp4_kernels as nk
from benchmarks.common import kernel_time
from nvfp4_kernels.testing import random_operand
from nvfp4_kernels.timing import SLEEP_CYCLES, L2Flush, cuda_time

CYCLES_PER_US = 2000  # sleep lengths: the H100's and H200's clocks are ~2 GHz


def touch(tensors, sink):
    for t in tensors:
        torch.sum(t.view(torch.uint8).reshape(-1)[::65536], dim=0, dtype=torch.int64, out=sink)


def event_time(fn, sets, flush, *, sleep=SLEEP_CYCLES, touched=False):
    """us: bench_gemm's single-call procedure (nvfp4_kernels.timing.cuda_time)."""
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    before = (lambda args: touch(args, sink)) if touched else None
    return cuda_time(fn, sets, flush=flush, reps=60, warmup=3, sleep=sleep, before=before) * 1e6


def launched(fn, args):
    """(name, grid, block) of each kernel one call launches."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            events = json.load(open(f.name))["traceEvents"]
    return sorted({(e["name"][:70], str(e["args"].get("grid")), str(e["args"].get("block")))
                   for e in events if e.get("cat") == "kernel"})


def trace_data(args, gen):
    """The same tensors' shapes and dtypes filled as tools/trace.cu fills its operands."""
    a, b, sa, sb, out = args

    def codes(t):
        return torch.randint(0, 256, t.shape, generator=gen, device="cuda", dtype=torch.uint8).view(t.dtype)

    def scales(t):
        return (0x28 + torch.randint(0, 32, t.shape, generator=gen, device="cuda", dtype=torch.uint8)).view(t.dtype)

    return codes(a), codes(b), scales(sa), scales(sb), out


def main(argv):
    shapes = [tuple(int(x) for x in s.split("x")) for s in argv] or [(128, 7168, 2048), (128, 4096, 1536)]
    flush = L2Flush()
    gen = torch.Generator(device="cuda").manual_seed(0)
    fn = lambda a, b, sa, sb, o: nk.gemm(a, b, sa, sb, out=o)  # noqa: E731
    cols = ["event", "S=1", "kernel", "touched", "sleep 10", "sleep 50", "sleep 800", "trace data"]
    print(f"{'shape':>16} " + " ".join(f"{c:>10}" for c in cols))
    for m, n, k in shapes:
        sets = []
        for _ in range(8):
            a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
            b = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
            sets.append((a.data, b.data, a.sf, b.sf, torch.empty(m, n, dtype=torch.float16, device="cuda")))
        print(f"{m}x{n}x{k} launches {launched(fn, sets[0])}", flush=True)
        like = [trace_data(s, gen) for s in sets]
        for _ in range(2):
            row = [
                event_time(fn, sets, flush),
                event_time(fn, sets[:1], flush),
                kernel_time(fn, sets, flush=flush, match="matmul", reps=40) * 1e6,
                event_time(fn, sets, flush, touched=True),
                *(event_time(fn, sets, flush, sleep=us * CYCLES_PER_US) for us in (10, 50, 800)),
                event_time(fn, like, flush),
            ]
            print(f"{f'{m}x{n}x{k}':>16} " + " ".join(f"{x:10.2f}" for x in row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
