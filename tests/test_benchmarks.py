"""The competition benchmark's own group sizes (benchmarks/competition.py
--groups): parsed, run through submission.custom_kernel and checked against the
reference like the task's shapes (on the CPU here: one call each)."""

import pytest

from benchmarks import competition


def test_groups_option_runs_and_checks_those_sizes(capsys):
    assert competition.main(["--groups", "8,24,1x256x512", "--no-bf16"]) == 0
    out = capsys.readouterr().out
    assert "group_gemm G=3 M=[8, 24, 1] N=256 K=512" in out
    assert "1 passed, 0 failed" in out


@pytest.mark.parametrize("spec", ["8,24x256", "8,ax256x512", "x256x512"])
def test_groups_option_rejects_malformed_sizes(spec, capsys):
    with pytest.raises(SystemExit):
        competition.main(["--groups", spec, "--no-bf16"])
    assert "expected M1,M2,...xNxK" in capsys.readouterr().err
