"""Every CUDA kernel once on small odd shapes, for compute-sanitizer
(dev/gpu_check.sh runs this under memcheck and racecheck, as the planner picks
and with kernels forced by NVFP4_FORCE_KERNEL). Exits non-zero if a result is
wrong.

    python dev/sanitize_cases.py                    # every part
    python dev/sanitize_cases.py stream-K skinny    # those parts (one process each: racecheck's way through)
    python dev/sanitize_cases.py --list             # the parts' names
"""

import sys
import time

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.testing import random_operand, vector_operand, within_tolerance


def main(only):
    t0 = time.monotonic()
    gen = torch.Generator().manual_seed(7)
    dev = "cuda"
    bf16 = torch.bfloat16
    bad = 0

    def progress(name):
        """Where a run is, and when: the last line a timed-out run printed."""
        torch.cuda.synchronize()
        print(f"case {name} at {time.monotonic() - t0:.0f} s", flush=True)

    names = []

    def section(name):
        """Whether to run a part: every part, or those named on the command line (a prefix is enough)."""
        names.append(name)
        if only == ["--list"]:
            return False
        if only and not any(name.startswith(p) for p in only):
            return False
        progress(name)
        return True

    def close(out, ref):
        """Within the fp16 tolerance; a bf16 result (one rounding of 2^-8) within 1e-2."""
        if out.dtype == torch.bfloat16:
            return torch.allclose(out.float(), ref.float(), rtol=1e-2, atol=1e-2, equal_nan=True)
        return bool(within_tolerance(out, ref).all())

    def w4a16_wrong(L, m, n, k, x_dtype, off, layout, alpha):
        """Whether W4A16's gemm (with a bias) or dual, fp16 out, is off the reference; x's rows start
        `off` values past 16-byte alignment."""
        b, b2 = (random_operand(L, n, k, gen=gen, device=dev, layout=layout) for _ in range(2))
        x = torch.randn(((L,) if L else ()) + (m, k + off), generator=gen).to(x_dtype).to(dev)[..., off:]
        bias = torch.randn(n, generator=gen).to(dev)
        got = nk.gemm_w4a16(x, b.data, b.sf, alpha=alpha, bias=bias, out_dtype=torch.float16)
        off_ref = not close(got, reference.gemm_w4a16(x, b.data, b.sf, alpha, bias, torch.float16))
        got = nk.dual_gemm_w4a16(x, b.data, b2.data, b.sf, b2.sf, alpha2=alpha, out_dtype=torch.float16)
        want = reference.dual_gemm_w4a16(x, b.data, b2.data, b.sf, b2.sf, None, alpha, torch.float16)
        return off_ref or not close(got, want)

    def wrong(op, a, b, b2):
        """Whether op ("gemm": a x b, "dual": silu(a x b) * (a x b2)) is off the reference."""
        if op == "gemm":
            return not close(nk.gemm(a.data, b.data, a.sf, b.sf), reference.gemm(a.data, b.data, a.sf, b.sf))
        return not close(nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf),
                         reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf))

    # (M, N, K) from (7, 129, 128) to (130, 20480, 64) take the Hopper tensor-core kernel there (K % 64 == 0);
    # (128, 256, 2048): split-K; (130, 20480, 64): 160 tiles, more than multiprocessors: two waves of CTAs;
    # the last 128-row tile of M = 130 / 161 / 200 runs wgmma of N = 32 / 64 / 96;
    # N = 1 takes the GEMV (its dual: the tensor cores), one 16-byte chunk per lane where rows are few:
    # (37, 512) and (2 x 37, 1024) with 16 and 32 lanes per row, (37, 8192) and (2 x 20, 16384) each row split
    # along K over 4 and 8 warps (csrc/cuda/gemv.cuh, GemvDeal); two chunks per lane where rows fill a wave of
    # warps (4224 on a 132-SM GPU): (4300, 256) with 4 lanes per row, (4300, 1024) blocked in row quads on
    # 264 CTAs (k CTAs per SM)
    cases = [(None, 7, 5, 48, "linear"), (2, 129, 33, 1040, "blocked"), (1, 200, 1, 64, "linear"),
             (None, 130, 300, 320, "blocked"), (2, 7, 129, 128, "linear"), (None, 128, 256, 2048, "blocked"),
             (None, 130, 20480, 64, "blocked"), (None, 161, 129, 256, "linear"), (None, 200, 129, 128, "blocked"),
             (None, 37, 1, 512, "linear"), (2, 37, 1, 1024, "linear"), (None, 37, 1, 8192, "blocked"),
             (2, 20, 1, 16384, "linear"), (None, 4300, 1, 256, "linear"), (None, 4300, 1, 1024, "blocked")]
    for L, m, n, k, lay in cases:  # a part each
        if not section(f"tiles, gemv {L} x {m} x {n} x {k} {lay}"):
            continue
        a = random_operand(L, m, k, gen=gen, device=dev, layout=lay)
        b = random_operand(L, n, k, gen=gen, device=dev, layout=lay)
        b2 = random_operand(L, n, k, gen=gen, device=dev, layout=lay)
        bad += not close(nk.gemm(a.data, b.data, a.sf, b.sf), reference.gemm(a.data, b.data, a.sf, b.sf))
        bad += not close(nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf),
                         reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf))
        v = vector_operand(random_operand(L, 1, k if k % 32 == 0 else k + 16, gen=gen, device=dev, layout=lay))
        if k % 32 == 0:  # the dp4a gemv path
            bad += not close(nk.gemv(a.data, v.data, a.sf, v.sf), reference.gemv(a.data, v.data, a.sf, v.sf))
    if section("groups"):
        probs = [(random_operand(None, m, k, gen=gen, device=dev), random_operand(None, n, k, gen=gen, device=dev))
                 for m, n, k in [(1, 7, 16), (129, 3, 48), (40, 129, 256)]]
        tc_probs = [(random_operand(None, m, k, gen=gen, device=dev), random_operand(None, n, k, gen=gen, device=dev))
                    for m, n, k in [(1, 7, 64), (129, 300, 128), (40, 129, 256)]]  # all K % 64 == 0: one wgmma launch
        for group in (probs, tc_probs):
            outs = nk.group_gemm([a.data for a, _ in group], [b.data for _, b in group], [a.sf for a, _ in group],
                                 [b.sf for _, b in group])
            for (a, b), out in zip(group, outs):
                bad += not close(out, reference.gemm(a.data, b.data, a.sf, b.sf))
    # M or N <= 4: the GEMV kernel with 3 vectors (roles swapped, 8 lanes per row; K % 128 == 64: 2) and with
    # 2 (4 lanes); the dual of M = 3, 2 and 1: the GEMV's dual (B1 and B2 rows in one warp), 2, 2 and 8 lanes
    # per row (M = 1: each row split along K over 2 warps); 3 x 100 x 8192 and the dual 2 x 16 x 7168 on the
    # integer-mma kernel (csrc/cuda/plan.cu, gemv_mma_pays: 64 and 56 steps for a CTA's 16 warps)
    if section("gemv, roles swapped"):
        for m, n, k in [(3, 300, 512), (3, 300, 576), (129, 2, 128), (3, 100, 8192)]:
            a = random_operand(2, m, k, gen=gen, device=dev, layout="blocked")
            b = random_operand(2, n, k, gen=gen, device=dev, layout="linear")
            bad += not close(nk.gemm(a.data, b.data, a.sf, b.sf), reference.gemm(a.data, b.data, a.sf, b.sf))
        for m, n, k in [(3, 300, 576), (2, 129, 192), (1, 300, 2048), (2, 16, 7168)]:
            a = random_operand(2, m, k, gen=gen, device=dev, layout="linear")
            b, b2 = (random_operand(2, n, k, gen=gen, device=dev, layout="blocked") for _ in range(2))
            bad += not close(nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf),
                             reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf))
    # The GEMV's integer-mma kernel (csrc/cuda/gemv_mma.cuh). M = 4: the dual 4 x 300 x 512 in
    # batches of 2 and the gemm 4 x 200 x 1024 (row sets split over warps, partials through shared memory), the
    # gemm 4 x 4000 x 256 (whole sets per warp); 4 x 32 (dual) or 64 (gemm) x 12288 in 66 batches (two CTAs per
    # batch on 132 SMs, >= 12 steps a warp): two steps per item (mma_cpl). M = 5..8 (gemv_mma_pays): the gemm
    # 6 x 200 x 1024 (row sets split over warps), 5 x 4000 x 256 (whole sets per warp), the dual 7 x 300 x 512 in
    # batches of 2, the dual 8 x 64 x 7168 and the gemm 6 x 96 x 7168 in 66 batches (two CTAs per batch, >= 160
    # steps: two steps per item); and the gemm 300 x 8 x 1024, a GEMV of B's 8 rows as given. Sets split
    # unevenly: 2 x 128 x 3456 (27 steps over 8 warps); three vectors two steps an item: 3 x 64 x 12288 in 66 batches
    for op, L, m, n, k in [("gemm", None, 2, 128, 3456), ("gemm", 66, 3, 64, 12288),
                           ("dual", 2, 4, 300, 512), ("gemm", None, 4, 200, 1024), ("gemm", None, 4, 4000, 256),
                           ("dual", 66, 4, 32, 12288), ("gemm", 66, 4, 64, 12288),
                           ("gemm", None, 6, 200, 1024), ("gemm", None, 5, 4000, 256), ("dual", 2, 7, 300, 512),
                           ("dual", 66, 8, 64, 7168), ("gemm", 66, 6, 96, 7168), ("gemm", None, 300, 8, 1024)]:
        if section(f"integer-mma gemv, {op} {L} x {m} x {n} x {k}"):  # a part each
            a = random_operand(L, m, k, gen=gen, device=dev, layout="blocked" if k == 512 else "linear")
            b, b2 = (random_operand(L, n, k, gen=gen, device=dev, layout="linear") for _ in range(2))
            bad += wrong(op, a, b, b2)
    # Stream-K (csrc/cuda/matmul_sm90.cu): 72 128-row tiles of 68 K steps (every second of 48 rows: wgmma of
    # N = 64); on a 132-SM Hopper the plan deals their K steps to 132 CTAs in ranges of equal cost (unequal
    # steps) that hand partials over through the workspace
    if section("stream-K"):
        a = random_operand(None, 176, 4352, gen=gen, device=dev, layout="blocked")
        b = random_operand(None, 36 * 256 - 77, 4352, gen=gen, device=dev, layout="linear")
        bad += not close(nk.gemm(a.data, b.data, a.sf, b.sf), reference.gemm(a.data, b.data, a.sf, b.sf))
    # The skinny kernel (csrc/cuda/skinny.cu; on Hopper M = 5..8 with K >= 8192 where the integer-mma GEMV does not
    # take the rows first: K = 32768, whose 8 vectors do not fit its shared memory): 8 x 200 x 32768 in batches of
    # 2 (row blocks of 128 items over many CTAs: partials, tickets), 5 x 70 x 32768 blocked (2 blocks, a tail)
    if section("skinny"):
        for L, m, n, k, lay in [(2, 8, 200, 32768, "linear"), (None, 5, 70, 32768, "blocked")]:
            a = random_operand(L, m, k, gen=gen, device=dev, layout=lay)
            b = random_operand(L, n, k, gen=gen, device=dev, layout="linear")
            bad += not close(nk.gemm(a.data, b.data, a.sf, b.sf), reference.gemm(a.data, b.data, a.sf, b.sf))
    # The mma.sync kernel (csrc/cuda/matmul_mma.cu; on Hopper K % 64 != 0, or forced: also every case
    # above): the cases of K = 48 and 1040 and the first group above take it; here K % 64 == 32
    # (16-byte copies, linear scale rows 2 bytes off a word: scales through registers), a dual of two 128-row
    # tiles, and views 8 bytes into each row (8-byte copies, scales 1 byte off)
    if section("mma.sync"):
        for op, L, m, n, k in [("gemm", 2, 70, 90, 96), ("dual", None, 200, 129, 1056)]:
            a = random_operand(L, m, k, gen=gen, device=dev, layout="linear")
            b, b2 = (random_operand(L, n, k, gen=gen, device=dev, layout="blocked") for _ in range(2))
            bad += wrong(op, a, b, b2)
        a, b = (random_operand(None, r, 656, gen=gen, device=dev) for r in (150, 130))
        a_data, a_sf, b_data, b_sf = a.data[:, 8:328], a.sf[:, 1:41], b.data[:, 8:328], b.sf[:, 1:41]
        bad += not close(nk.gemm(a_data, b_data, a_sf, b_sf), reference.gemm(a_data, b_data, a_sf, b_sf))
    if section("quantize"):
        # quantize (csrc/cuda/quantize.cu): a warp per 32 columns (small) and per 128 (4300 rows), rows 8 bytes off
        # 16-byte alignment (scalar loads), the blocked layout's padding rows and columns, a device global scale
        for shape, dtype, lay in [((2, 7, 80), torch.bfloat16, "blocked"), ((4300, 2048), torch.float16, "linear"),
                                  ((130, 1040), torch.float32, "blocked")]:
            x = (torch.randn(shape, generator=gen) * 10).to(dtype).to(dev)
            g = torch.tensor(0.5, device=dev)
            for xs in (x, x[..., 4:-12] if dtype != torch.float32 else x[..., 2:-14]):
                got, want = nk.quantize(xs, global_scale=g, sf_layout=lay), reference.quantize(xs.cpu(), 0.5, lay)
                bad += not (torch.equal(got[0].cpu(), want[0]) and
                            torch.equal(got[1].cpu().view(torch.uint8), want[1].view(torch.uint8)))
                # quantized values, a global scale per row (rows of the unaligned view: scalar stores)
                rows = torch.rand(xs.shape[:-1], generator=gen).to(dev) + 0.25
                got = nk.quantized_values(xs, global_scale=rows)
                bad += not torch.equal(got.cpu(), reference.quantized_values(xs.cpu(), rows.cpu()))
        # quantized values of gathered rows with a table of global scales (an MoE's W4A4 rows), two indices
        # outside their ranges (NaN rows, nothing read outside)
        x = (torch.randn(9, 2064, generator=gen) * 10).to(torch.bfloat16).to(dev)
        table = torch.rand(6, generator=gen) + 0.25
        ri = torch.tensor([8, 0, 3, 3, 9, 1, 2], dtype=torch.int32)
        si = torch.tensor([5, 0, 1, -1, 2, 2, 4], dtype=torch.int32)
        got = nk.quantized_values(x, global_scale=table.to(dev), row_index=ri.to(dev), scale_index=si.to(dev)).cpu()
        ok = [0, 1, 2, 5, 6]
        want = reference.quantized_values(x.cpu()[ri[ok].long()], table[si[ok].long()])
        bad += not (torch.equal(got[ok], want) and torch.isnan(got[[3, 4]]).all())
    if section("epilogue, w4a16"):
        # The epilogue (csrc/cuda/common.cuh) on the GEMV (roles swapped: a bias by row), skinny, wgmma and mma.sync
        # routes: bf16 out, a bias, alphas as device tensors; and W4A16 (csrc/cuda/w4a16.cu): fp16 and bf16
        # activations, the cp.async path and the register path (rows 2 bytes off 16-byte alignment, K % 64 != 0),
        # a dual, a bias, a batch; few tiles, whose CTAs share K
        alpha = torch.tensor(0.75, device=dev)
        for m, n, k in [(3, 300, 512), (8, 200, 32768), (130, 300, 320), (70, 90, 96)]:
            a = random_operand(None, m, k, gen=gen, device=dev)
            b = random_operand(None, n, k, gen=gen, device=dev, layout="blocked")
            bias = torch.randn(n, generator=gen).to(dev)
            got = nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha, bias=bias, out_dtype=bf16)
            want = reference.gemm(a.data, b.data, a.sf, b.sf, alpha, bias, bf16)
            bad += not close(got, want)
        for L, m, n, k, x_dtype, off in [(None, 1, 300, 512, torch.float16, 0), (2, 130, 129, 1040, bf16, 0),
                                         (None, 1030, 4100, 256, bf16, 0),
                                         (None, 7, 64, 80, bf16, 1), (None, 65, 33, 48, torch.float16, 0),
                                         # split-K: the partials, the tickets, the last CTA's sum
                                         (None, 1, 300, 4096, torch.float16, 0), (None, 7, 64, 2080, bf16, 1),
                                         (2, 20, 129, 1040, bf16, 0),
                                         # M <= 32, K % 128 == 0: the GEMV kernel (the warps' sums in shared
                                         # memory), 8, 16 and 32 rows a tile
                                         (2, 5, 129, 8192, bf16, 0), (None, 14, 300, 4096, torch.float16, 0),
                                         (2, 27, 129, 4096, bf16, 0), (None, 32, 300, 2048, torch.float16, 0)]:
            bad += w4a16_wrong(L, m, n, k, x_dtype, off, "linear", alpha)
    if section("w4a16 on wgmma"):
        # W4A16 on Hopper (csrc/cuda/matmul_sm90.cu: raw 16-bit rows permuted by the producer): fp16 and bf16
        # activations, 32-, 64- and 128-row tiles with rows past M, split-K, a batch, a dual; M < 64 takes the wgmma
        # kernel where plan.cu's rule says or NVFP4_FORCE_KERNEL=wgmma forces it
        alpha = torch.tensor(-0.5, device=dev)
        for L, m, n, k, x_dtype in [(None, 64, 7, 64, torch.float16), (2, 129, 300, 1024, bf16),
                                    (None, 300, 136, 576, torch.float16), (None, 200, 96, 2048, bf16),
                                    (None, 40, 33, 192, bf16), (None, 130, 300, 320, bf16),
                                    (None, 1, 129, 256, bf16), (2, 17, 300, 1024, torch.float16),
                                    (None, 32, 136, 576, bf16),
                                    (None, 176, 36 * 256 - 77, 4352, bf16)]:  # the last: stream-K
            bad += w4a16_wrong(L, m, n, k, x_dtype, 0, "blocked", alpha)
    if section("prefill, cuBLASLt"):
        # W4A16 / W4A4 gemms of many rows on Hopper (csrc/cuda/cublas.cu): weights decoded into the scratch from
        # each layout, cuBLASLt's GEMM with a device alpha and a bias of the output's dtype; a batch; N past the
        # last 128-row block; two slices of weight rows (8200 rows of K = 16384, the last slice shorter)
        alpha = torch.tensor(0.75, device=dev)
        for L, m, n, k, x_dtype, layout in [(None, 2049, 304, 1024, bf16, "linear"),
                                            (2, 1030, 264, 2048, torch.float16, "blocked"),
                                            (None, 2048, 8200, 16384, bf16, "linear")]:
            b = random_operand(L, n, k, gen=gen, device=dev, layout=layout)
            x = torch.randn(((L,) if L else ()) + (m, k), generator=gen).to(x_dtype).to(dev)
            bias = torch.randn(n, generator=gen).to(x_dtype).to(dev)
            print("  ", L, m, n, k, nk.kernel_name("gemm_w4a16", x, b.data, b.sf), flush=True)
            # the result has x's type (cuBLASLt's bias and output share it)
            got = nk.gemm_w4a16(x, b.data, b.sf, alpha=alpha, bias=bias)
            bad += not close(got, reference.gemm_w4a16(x, b.data, b.sf, alpha, bias))
            if L is None:
                got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=0.5, alpha=alpha, bias=bias)
                bad += not close(got, reference.gemm_w4a4(x, b.data, b.sf, 0.5, alpha, bias))
    if section("w4a4 by tile"):
        # the checkpoint's bytes laid out by tile (a w4a4 NVFP4Linear on a GPU): one row on the dp4a GEMV that
        # quantizes it (bf16 x, the global scale a tensor; CTAs of 512 threads, of 768 at 3.5 blocks of x a
        # thread, of 1024 at 5) or after the quantize kernel (fp16 x, a float); rows
        # split unevenly over warps, or not; one and two chunks a lane; K past whole groups of 4 K steps; the dual;
        # 2 to 4 rows on the integer-mma GEMV (split sets from an odd step, two steps an item, K past whole
        # groups; bf16 x quantized in it up to 2 blocks of 16 a thread, 3 x 4096; 4 x 8192 quantized first); then
        # rows on the quantized values (W4A16 kernels by tile)
        for m, n, k, x_dtype in [(1, 384, 1088, bf16), (1, 4352, 768, torch.float16), (1, 128, 18944, bf16),
                                 (1, 128, 28672, bf16), (1, 128, 40960, bf16),
                                 (1, 6144, 1024, bf16), (2, 128, 3456, bf16), (3, 256, 640, torch.float16),
                                 (3, 384, 4096, bf16), (4, 256, 8192, bf16), (4, 128, 24576, bf16),
                                 (7, 256, 512, bf16), (40, 384, 1024, torch.float16)]:
            b, b2 = (random_operand(None, n, k, gen=gen, device=dev) for _ in range(2))
            (t, ts), (t2, ts2) = (nk.layouts.to_expert_tiles(o.data[None], o.sf[None]) for o in (b, b2))
            x = torch.randn(m, k, generator=gen).to(x_dtype).to(dev)
            g = torch.tensor([0.5], device=dev) if x_dtype == bf16 else 0.5
            print("  ", m, n, k, nk.kernel_name("gemm_w4a4", x, t, ts), flush=True)
            got = nk.gemm_w4a4(x, t, ts, global_scale=g, alpha=-0.75)
            bad += not close(got, reference.gemm_w4a4(x, b.data, b.sf, g, -0.75))
            got = nk.dual_gemm_w4a4(x, t, t2, ts, ts2, global_scale=g, alpha2=2.0)
            bad += not close(got, reference.dual_gemm_w4a4(x, b.data, b2.data, b.sf, b2.sf, g, None, 2.0))
    if section("w4a4 one row"):
        # one row quantized in the dp4a GEMV on the checkpoint's layouts, batched: CTAs of 512 (K = 4096), 768 (5120)
        # and 1024 threads (18944: a block of x a thread); gemm and dual
        for k, lay in [(4096, "linear"), (5120, "blocked"), (5120, "linear"), (18944, "linear")]:
            b, b2 = (random_operand(2, 136, k, gen=gen, device=dev, layout=lay) for _ in range(2))
            x = torch.randn(2, 1, k, generator=gen).to(bf16).to(dev)
            g = torch.tensor([0.5], device=dev)
            print("  ", k, lay, nk.kernel_name("gemm_w4a4", x, b.data, b.sf), flush=True)
            got = nk.gemm_w4a4(x, b.data, b.sf, global_scale=g, alpha=-0.75)
            bad += not close(got, torch.stack([reference.gemm_w4a4(x[i], b.data[i], b.sf[i], g, -0.75)
                                               for i in range(2)]))
            got = nk.dual_gemm_w4a4(x[0], b.data[0], b2.data[0], b.sf[0], b2.sf[0], global_scale=g, alpha2=2.0)
            bad += not close(got, reference.dual_gemm_w4a4(x[0], b.data[0], b2.data[0], b.sf[0], b2.sf[0], g, None,
                                                           2.0))
    if section("grouped_mm"):
        # rows grouped by expert (common.cuh's expert_tile): empty experts, rows past the last, 16- and 64-row
        # tiles, plain and gated, split K (w4a16.cu); from 64 rows an expert the wgmma kernel's 128-row tiles
        # (several column tiles of a row tile side by side); from K = 2048 their pre-pass (bulk copies of a
        # tile's rows, rows by token gathered)
        for sizes, t, n, k, gated in [([3, 0, 5, 1], 12, 48, 80, True), ([0, 40, 0, 70], 120, 96, 272, False),
                                      ([2, 1], 4, 300, 4096, False), ([1] * 40, 40, 64, 512, True),
                                      ([130, 0, 70, 200], 410, 96, 256, False),
                                      ([64, 65, 63, 0, 129], 330, 128, 512, True),
                                      ([0, 300, 90], 400, 600, 256, False), ([200, 0, 100], 310, 300, 128, True),
                                      ([130, 0, 70, 200, 1], 410, 96, 2048, True),
                                      ([64, 65, 0, 129, 3], 270, 136, 2112, False),
                                      ([40, 0, 30], 72, 1936, 2048, True)]:
            e = len(sizes)
            w = random_operand(e, 2 * n if gated else n, k, gen=gen, device=dev)
            x = torch.randn(t, k, generator=gen).to(bf16).to(dev)
            offs = torch.tensor(sizes).cumsum(0).to(torch.int32).to(dev)
            alphas = (torch.rand(e, generator=gen) + 0.5).to(dev)
            got = nk.grouped_mm(x, w.data, w.sf, offs, alphas=alphas, gated=gated, out_dtype=torch.float16)
            want = reference.grouped_mm(x, w.data, w.sf, offs, alphas, None, gated, torch.float16)
            rows = sum(sizes)
            bad += not close(got[:rows], want[:rows])
            # rows read in place through row_index (from fewer tokens; two indices outside x: zero rows)
            index = torch.randint(0, t // 2 + 1, (t,), generator=gen, dtype=torch.int32)
            index[1], index[-1] = -3, t
            got = nk.grouped_mm(x[: t // 2 + 1], w.data, w.sf, offs, alphas=alphas, gated=gated,
                                out_dtype=torch.float16, row_index=index.to(dev))
            rows_of = torch.cat([x[: t // 2 + 1], torch.zeros_like(x[:1])])[index.clamp(-1, t // 2 + 1).long()]
            want = reference.grouped_mm(rows_of, w.data, w.sf, offs, alphas, None, gated, torch.float16)
            bad += not close(got[:rows], want[:rows])
            # and quantized with each expert's global scale first (W4A4; the pre-pass quantizes from K = 2048)
            g = (torch.rand(e, generator=gen) + 0.5).to(dev)
            index[1], index[-1] = 0, t // 2
            expert = torch.repeat_interleave(torch.arange(e), torch.tensor(sizes))
            expert = torch.cat([expert, torch.full((t - rows,), e - 1)]).to(torch.int32).to(dev)
            got = nk.grouped_mm(x[: t // 2 + 1], w.data, w.sf, offs, alphas=alphas, gated=gated,
                                out_dtype=torch.float16, row_index=index.to(dev), global_scale=g)
            values = nk.quantized_values(x[: t // 2 + 1], global_scale=g, row_index=index.to(dev), scale_index=expert)
            want = reference.grouped_mm(values, w.data, w.sf, offs, alphas, None, gated, torch.float16)
            bad += not close(got[:rows], want[:rows])
    if section("moe ops"):
        # the sort's one CTA (shared-memory counts, match.any ranks; ids outside the experts) and, from 8192
        # pairs, its several CTAs (the counts' scratch table, each CTA's scan of it), the combine's 16-byte and
        # element paths and the routing, against the CPU's results
        for t, k, e in [(1, 8, 256), (37, 6, 8192), (1000, 8, 3), (5, 2, 1), (2100, 8, 40), (1100, 8, 300)]:
            ids = torch.randint(-1, e + 1, (t, k), generator=gen)
            ok = (ids >= 0) & (ids < e)
            got = nk.moe_sort(ids.to(dev), e)
            rows, n = got[2].cpu(), int(ok.sum())
            bad += not torch.equal(rows >= 0, ok)
            bad += not torch.equal(got[3].cpu(), torch.bincount(ids[ok], minlength=e).cumsum(0).int())
            bad += not torch.equal(got[0][n:].cpu(), torch.zeros(t * k - n, dtype=torch.int32))
            bad += not bool((got[1][:n].cpu().diff() >= 0).all())
            if n == t * k:  # the CPU refuses ids outside the experts
                bad += not all(torch.equal(a.cpu(), b) for a, b in zip(got, nk.moe_sort(ids, e)))
            for h, dtype in [(2048, bf16), (37, torch.float16), (64, torch.float32)]:
                y = torch.randn(t * k, h, generator=gen).to(dtype)
                w = torch.rand(t, k, generator=gen)
                out = nk.moe_combine(y.to(dev), rows.to(dev), w.to(dev))
                bad += not torch.equal(out.cpu(), nk.moe_combine(y, rows, w))
        # the routing's warps (a token each, tokens past the last warp's), softmax and grouped sigmoid
        for t, e, k, kw in [(5, 128, 8, {}), (37, 256, 8, dict(scoring="sigmoid", n_group=8, topk_group=4)),
                            (3, 2048, 32, {})]:
            logits = torch.randn(t, e, generator=gen).to(bf16)
            got, want = nk.moe_route(logits.to(dev), k, **kw), nk.moe_route(logits, k, **kw)
            bad += not torch.equal(got[1].cpu(), want[1])
            bad += not torch.allclose(got[0].cpu(), want[0], rtol=1e-5)
    if only == ["--list"]:
        print("\n".join(names))
        return
    unknown = [p for p in only if not any(n.startswith(p) for n in names)]
    if unknown:
        raise SystemExit(f"sanitize_cases: no part named {unknown}; the parts: {names}")
    torch.cuda.synchronize()
    print(f"sanitize cases: {bad} wrong results")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
