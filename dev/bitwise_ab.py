"""Bit-for-bit A/B of two builds: every op on a fixed battery of inputs (every route of the
planner, every kernel, the competition's shapes), each output hashed.

    python dev/bitwise_ab.py write OUT.json     # in each build (same GPU, same torch)
    python dev/bitwise_ab.py compare A.json B.json

Inputs come from seeded generators on the GPU, so both builds see the same bytes. Uses only the
ops' public calls, so an older build of the package runs it too. NVFP4_FORCE_KERNEL (or an older
build's own switches) set in the environment changes which kernel runs; ONLY=tiles restricts the
battery to calls every tile kernel takes alike (M > 16, N > 8, no gemv op) for such runs.
"""

import hashlib
import json
import os
import sys



def digest(t):
    """The first 16 hex digits of the sha256 of t's bytes, in row-major order."""
    import torch

    flat = t.detach().reshape(-1).clone()  # a fresh 1-D tensor, whatever t's strides
    return hashlib.sha256(flat.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:16]


def battery(tiles_only):
    import torch

    import nvfp4_kernels as nk
    try:
        from nvfp4_kernels.gpumode import competition, tasks
        from nvfp4_kernels.gpumode.harness import competition_inputs
    except ImportError:  # a revision from before the package's gpumode/ folder
        from nvfp4_kernels import competition, tasks
        from nvfp4_kernels.testing import competition_inputs
    from nvfp4_kernels.testing import random_operand

    gen = torch.Generator(device="cuda").manual_seed(1234)
    out = {}

    def op(L, m, n, k, lay_a, lay_b):
        a = random_operand(L, m, k, gen=gen, device="cuda", layout=lay_a)
        b = random_operand(L, n, k, gen=gen, device="cuda", layout=lay_b)
        b2 = random_operand(L, n, k, gen=gen, device="cuda", layout=lay_b)
        return a, b, b2

    lays = [("linear", "linear"), ("blocked", "blocked"), ("linear", "blocked"), ("blocked", "linear")]
    ms = [17, 33, 64, 65, 128, 129, 200, 256, 512, 1000] if tiles_only else \
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 32, 33, 64, 65, 128, 129, 200, 256, 512, 1000]
    ns = [9, 129, 300, 2048, 4100] if tiles_only else [1, 2, 4, 5, 8, 9, 129, 300, 2048, 4100]
    ks = [48, 64, 256, 1040, 2048, 8192]
    i = 0
    for m in ms:
        for n in ns:
            for k in ks:
                i += 1
                if (m * n * k > 2**33) or (i % 3 and m * n * k > 2**28):  # a thinner sample of the large ones
                    continue
                L = 2 if i % 5 == 0 else None
                la, lb = lays[i % 4]
                a, b, b2 = op(L, m, n, k, la, lb)
                alpha = torch.tensor(0.75, device="cuda")
                out[f"gemm {L} {m}x{n}x{k} {la}/{lb}"] = digest(nk.gemm(a.data, b.data, a.sf, b.sf, alpha=alpha))
                if la == lb or i % 2:  # (the GEMV's dual needs A and A2 in one layout; the rest any)
                    out[f"dual {L} {m}x{n}x{k} {la}/{lb}"] = digest(
                        nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf))
    # long K, few rows: the GEMV, skinny, split-K and stream-K routes
    for L, m, n, k in [(None, 8, 7168, 16384), (None, 12, 4096, 16384), (None, 128, 7168, 16384),
                       (None, 200, 3 * 132 // 8 * 256 - 77, 16384), (2, 100, 3 * 132 // 8 * 128 - 77, 16384),
                       (2, 1000, 16381, 4096), (None, 500, 4000, 8192), (None, 256, 3072, 4096),
                       (None, 4, 14336, 4096), (None, 5, 4096, 8192), (None, 2, 28672, 4096)]:
        if tiles_only and (m <= 16 or n <= 8):
            continue
        a, b, b2 = op(L, m, n, k, "blocked", "linear")
        out[f"gemm {L} {m}x{n}x{k}"] = digest(nk.gemm(a.data, b.data, a.sf, b.sf))
        a, b, b2 = op(L, m, n // 2, k, "blocked", "blocked")
        out[f"dual {L} {m}x{n // 2}x{k}"] = digest(nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf))
    if not tiles_only:
        for L, m, k in [(None, 7168, 16384), (8, 4096, 7168), (4, 7168, 2048), (None, 7, 16384), (None, 300, 1040),
                        (3, 129, 192), (None, 4300, 1024), (2, 1100, 4096)]:
            for lay in ("linear", "blocked"):
                a = random_operand(L, m, k, gen=gen, device="cuda", layout=lay)
                v = random_operand(L, 1, k, gen=gen, device="cuda", layout="linear")
                vd, vs = v.data.squeeze(-2), v.sf.squeeze(-2)
                out[f"gemv {L} {m}x{k} {lay}"] = digest(nk.gemv(a.data, vd, a.sf, vs))
    groups = [[(80, 4096, 7168), (176, 4096, 7168), (248, 4096, 7168)], [(231, 7168, 4096), (58, 7168, 4096)] * 4,
              [(m, 33, 64 * (1 + m % 3)) for m in range(17, 40)], [(64, 300, 1024), (40, 256, 4096), (33, 129, 128)],
              [(100, 200, 48), (300, 129, 1040)]]
    for gi, sizes in enumerate(groups):
        probs = [op(None, m, n, k, "linear", "blocked")[:2] for m, n, k in sizes]
        outs = nk.group_gemm([a.data for a, _ in probs], [b.data for _, b in probs], [a.sf for a, _ in probs],
                             [b.sf for _, b in probs])
        out[f"group {gi}"] = digest(torch.cat([o.flatten() for o in outs]))
    if not tiles_only:
        for shape, dtype, lay in [((4096, 7168), torch.bfloat16, "linear"), ((2, 129, 1040), torch.float16, "blocked"),
                                  ((300, 2048), torch.float32, "blocked"), ((7, 80), torch.bfloat16, "linear")]:
            x = torch.randn(shape, generator=gen, device="cuda").to(dtype) * 10
            codes, sf = nk.quantize(x, global_scale=torch.tensor(0.3, device="cuda"), sf_layout=lay)
            out[f"quantize {shape} {dtype} {lay}"] = digest(codes) + digest(sf.view(torch.uint8))
        for problem in tasks.PROBLEMS:
            for si, shape in enumerate(tasks.shapes(problem)["benchmarks"]):
                data = competition_inputs(problem, shape, seed=100 + si, device="cuda")
                res = competition.custom_kernel(data)
                res = torch.cat([r.flatten() for r in res]) if isinstance(res, list) else res
                out[f"competition {problem} {si}"] = digest(res)
    torch.cuda.synchronize()
    return out


def main(argv):
    if argv[0] == "write":
        res = battery(os.environ.get("ONLY") == "tiles")
        with open(argv[1], "w") as f:
            json.dump(res, f, indent=0, sort_keys=True)
        print(f"{len(res)} outputs hashed into {argv[1]}")
        return 0
    a, b = (json.load(open(p)) for p in argv[1:3])
    same = [k for k in a if b.get(k) == a[k]]
    diff = [k for k in a if k in b and b[k] != a[k]]
    missing = sorted(set(a) ^ set(b))
    print(f"{len(same)} of {len(a)} outputs bit-identical; {len(diff)} differ; {len(missing)} in one file only")
    for k in diff[:20]:
        print("  differs:", k)
    return 0 if not diff and not missing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
