"""The GPU MODE harness as our tooling reproduces it (docs/competition.md): the
tuples it hands to custom_kernel, their exact results, and its timing
statistics and stop rule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import reference
from ..layouts import batch_first, batch_last, blocked_to_competition, to_blocked
from ..testing import E4M3, FP4, Operand, random_operand

# ---- the competition's tuples -------------------------------------------------


def _harness_operand(problem, L, rows, k, gen, device):
    """The harness's narrow values (docs/competition.md): gemv codes 0-3 in the low
    nibble only; gemm all bytes; dual / group the sign and two low bits of each
    code. Scales: gemm small integers (1, 2), the others rand() in [0, 1) cast
    to e4m3 (zeros and subnormals occur)."""
    shape = (L, rows, k // 2)
    raw = torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8, device=device)
    if problem == "gemv":
        raw = raw & 0x03
    elif problem in ("dual_gemm", "group_gemm"):
        raw = raw & 0xBB
    sf_shape = (L, rows, k // 16)
    if problem == "gemm":
        sf = torch.randint(1, 3, sf_shape, generator=gen, device=device).to(E4M3)
    else:
        sf = torch.rand(sf_shape, generator=gen, device=device).to(E4M3)
    return Operand(raw.view(FP4), sf)


def _competition_operand(L, rows, k, gen, device, problem=None):
    """(data (R, K/2, L), linear sf (R, K/16, L), permuted sf) over batch-first
    memory; full-range values, or the harness's for `problem`."""
    if problem is None:
        op = random_operand(L, rows, k, gen=gen, device=device)
    else:
        op = _harness_operand(problem, L, rows, k, gen, device)
    blocked = to_blocked(op.sf.view(torch.uint8), pad=0x7F).view(E4M3)
    return batch_last(op.data), batch_last(op.sf), blocked_to_competition(blocked)


def competition_inputs(problem: str, shape: dict, *, seed: int = 0, device="cpu", values="full"):
    """The tuple the GPU MODE harness hands to custom_kernel for `problem`
    ("gemv", "gemm", "dual_gemm", "group_gemm") and a task.yml `shape` dict.
    values="full": our full-range values; "harness": the harness's narrow ones.
    c / the outputs are poisoned with NaN."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dist = None if values == "full" else problem
    if problem == "group_gemm":
        abc, sf, sf_perm, sizes = [], [], [], []
        for m, n, k in zip(shape["m"], shape["n"], shape["k"]):
            a, sfa, sfa_p = _competition_operand(1, m, k, gen, device, dist)
            b, sfb, sfb_p = _competition_operand(1, n, k, gen, device, dist)
            c = batch_last(torch.full((1, m, n), float("nan"), dtype=torch.float16, device=device))
            abc.append((a, b, c))
            sf.append((sfa.cpu(), sfb.cpu()))  # the harness keeps these on the CPU
            sf_perm.append((sfa_p, sfb_p))
            sizes.append((m, n, k, 1))
        return abc, sf, sf_perm, sizes
    m, k, L = shape["m"], shape["k"], shape["l"]
    n = 1 if problem == "gemv" else shape["n"]
    a, sfa, sfa_p = _competition_operand(L, m, k, gen, device, dist)
    b_rows = 128 if problem == "gemv" else n  # gemv: only row 0 of b is the vector
    b, sfb, sfb_p = _competition_operand(L, b_rows, k, gen, device, dist)
    c = batch_last(torch.full((L, m, n), float("nan"), dtype=torch.float16, device=device))
    if problem == "dual_gemm":
        b2, sfb2, sfb2_p = _competition_operand(L, n, k, gen, device, dist)
        return a, b, b2, sfa, sfb, sfb2, sfa_p, sfb_p, sfb2_p, c
    return a, b, sfa, sfb, sfa_p, sfb_p, c


def competition_reference(problem: str, data):
    """The exact result for a competition tuple, as the harness's c layout (R, N, L)."""
    if problem == "group_gemm":
        abc, sf, _, _ = data
        return [
            batch_last(reference.gemm(batch_first(a), batch_first(b), batch_first(sfa).to(a.device),
                                      batch_first(sfb).to(a.device)))
            for (a, b, _), (sfa, sfb) in zip(abc, sf)
        ]
    if problem == "dual_gemm":
        a, b1, b2, sfa, sfb1, sfb2 = (batch_first(t) for t in data[:6])
        return batch_last(reference.dual_gemm(a, b1, b2, sfa, sfb1, sfb2))
    a, b, sfa, sfb = (batch_first(t) for t in data[:4])
    if problem == "gemv":
        b, sfb = b[:, :1], sfb[:, :1]
    return batch_last(reference.gemm(a, b, sfa, sfb))


# ---- the harness's statistics and stop rule (docs/competition.md, Timing) ----


@dataclass
class Stats:
    runs: int
    mean: float  # the unit of the samples (the eval uses ns)
    std: float  # sample standard deviation (n - 1)
    err: float  # standard error of the mean, std / sqrt(n)
    best: float
    worst: float


def stats(samples: list[float]) -> Stats:
    n = len(samples)
    mean = sum(samples) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in samples) / (n - 1)) if n > 1 else 0.0
    return Stats(runs=n, mean=mean, std=std, err=std / math.sqrt(n), best=min(samples), worst=max(samples))


def should_stop(samples_ns: list[float], elapsed_ns: float, max_time_ns: float) -> bool:
    """After at least 3 samples and 100 ms: stop once the error of the mean is
    under 0.1% of it, or the samples add up to max_time_ns, or 2 minutes passed."""
    if len(samples_ns) < 3 or elapsed_ns <= 1e8:
        return False
    s = stats(samples_ns)
    return s.err / s.mean < 0.001 or s.mean * s.runs > max_time_ns or elapsed_ns > 120e9
