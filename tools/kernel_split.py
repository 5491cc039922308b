"""Per-kernel GPU times of one op call (the profiler's, CUPTI), L2 flushed
before each call, inputs rotated: where a call's time goes when it launches
more than one kernel (the pre-decoded tensor-core path: act_predecode_kernel,
then matmul_sm90_kernel). Development tool.

    python3 tools/kernel_split.py gemm:4096x4096x4096 dual:512x4096x7168 ...
"""
import re
import statistics
import sys
import warnings
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import nvfp4_kernels as nk
from nvfp4_kernels.testing import random_operand
from nvfp4_kernels.timing import SLEEP_CYCLES, L2Flush


def main():
    gen = torch.Generator().manual_seed(1)
    flush = L2Flush()
    for spec in sys.argv[1:]:
        op, shape = spec.split(":")
        m, n, k = map(int, shape.split("x"))
        sets = []
        for _ in range(3):
            a = random_operand(None, m, k, gen=gen, device="cuda", layout="blocked")
            b = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked")
            b2 = random_operand(None, n, k, gen=gen, device="cuda", layout="blocked") if op == "dual" else None
            sets.append((a, b, b2))
        if op == "dual":
            fn = lambda a, b, b2: nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
        else:
            fn = lambda a, b, b2: nk.gemm(a.data, b.data, a.sf, b.sf)
        for s in sets:
            fn(*s)
        torch.cuda.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for r in range(30):
                    flush()
                    torch.cuda._sleep(SLEEP_CYCLES)
                    fn(*sets[r % 3])
                torch.cuda.synchronize()
        times = defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and ("sm90" in e.name or "predecode" in e.name):
                name = re.search(r"(act_predecode_kernel|matmul_sm90_kernel<[^>]*>)", e.name)
                times[name[1] if name else e.name[:40]].append(e.time_range.elapsed_us())
        print(spec, "  ".join(f"{name}: {statistics.median(v):.1f}" for name, v in sorted(times.items())))


if __name__ == "__main__":
    main()
