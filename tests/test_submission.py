"""submission.custom_kernel on competition-format inputs (docs/competition.md layouts,
our full-range values), judged with the competition's tolerance. On the CPU only
the smaller task shapes run (the large ones take minutes there)."""

import pytest
import torch

import submission
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.gpumode.harness import competition_inputs, competition_reference
from conftest import SEED, assert_matches


def _work(problem, s):
    if problem == "group_gemm":
        return sum(m * n * k for m, n, k in zip(s["m"], s["n"], s["k"]))
    return s["m"] * s.get("n", 1) * s["k"] * s["l"]


CASES = [(p, i, s) for p in tasks.PROBLEMS for i, s in enumerate(tasks.shapes(p)["tests"])]


@pytest.mark.parametrize("problem,i,shape", CASES, ids=[f"{p}{i}" for p, i, _ in CASES])
def test_custom_kernel(device, problem, i, shape):
    if device == "cpu" and _work(problem, shape) > 1.5e10:
        pytest.skip("large task shape: run on the GPU (test_ops covers it on the CPU)")
    data = competition_inputs(problem, shape, seed=SEED + i, device=device)
    ref = competition_reference(problem, data)
    got = submission.custom_kernel(data)
    if problem == "group_gemm":
        for g, (out, want, (_, _, c)) in enumerate(zip(got, ref, data[0])):
            assert out is c, "group gemm must return the harness's c tensors"
            assert_matches(out, want, f"{problem} {shape} group {g} on {device}")
    else:
        assert got is data[-1], "custom_kernel must write into and return the harness's c"
        assert_matches(got, ref, f"{problem} {shape} on {device}")


def test_competition_group_gemm_checks_its_layouts():
    """The C++ entry behind the group adapter names the bad argument."""
    data = competition_inputs("group_gemm", {"m": [8, 16], "n": [8, 24], "k": [64, 128]}, seed=SEED)
    abc, _, sf_perm, _ = data
    a, b, c = ([t[i] for t in abc] for i in range(3))
    sfa, sfb = [s for s, _ in sf_perm], [s for _, s in sf_perm]
    op = torch.ops.nvfp4.competition_group_gemm
    with pytest.raises(ValueError, match=r"competition_group_gemm: a\[1\] must be \(R, C, L\)"):
        op([a[0], a[1][:, :, 0]], b, sfa, sfb, c)
    with pytest.raises(ValueError, match=r"sfb\[0\] must be permuted scales"):
        op(a, b, sfa, [sfb[0][..., 0], sfb[1]], c)
    with pytest.raises(ValueError, match=r"equal lengths"):
        op(a, b[:1], sfa, sfb, c)


def test_competition_gemm_ops_check_their_layouts():
    """The C++ entries behind the gemv / gemm and dual adapters name the bad argument."""
    gemv = competition_inputs("gemv", {"m": 16, "k": 64, "l": 2}, seed=SEED)
    gemm = competition_inputs("gemm", {"m": 8, "n": 24, "k": 64, "l": 1}, seed=SEED)
    dual = competition_inputs("dual_gemm", {"m": 8, "n": 24, "k": 64, "l": 1}, seed=SEED)
    op = torch.ops.nvfp4.competition_gemm
    with pytest.raises(ValueError, match=r"competition_gemm: a must be \(R, C, L\)"):
        op(gemv[0][:, :, 0], *gemv[1:])
    with pytest.raises(ValueError, match=r"competition_gemm: sfb_perm must be permuted scales"):
        op(*gemm[:5], gemm[5][..., 0], gemm[6])
    with pytest.raises(ValueError, match=r"nvfp4.gemm: b has K/2=32 but a has K/2=16"):
        op(gemm[0][:, :16], *gemm[1:])
    op_dual = torch.ops.nvfp4.competition_dual_gemm
    with pytest.raises(ValueError, match=r"competition_dual_gemm: sfb2_perm must be permuted scales"):
        op_dual(*dual[:8], dual[8][..., 0], dual[9])
    with pytest.raises(ValueError, match=r"competition_dual_gemm: c must be \(R, C, L\)"):
        op_dual(*dual[:9], dual[9][:, :, 0])
