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


def test_row_shows_the_speedup_at_the_speed_of_light():
    """The bound a speedup target has to fit under: bf16 time over SOL time."""
    row = {"problem": "gemm", "shape": "M=128 N=7168 K=2048 L=1", "ok": True, "t_call_us": 20.0, "sol_us": 5.0,
           "frac_sol": 0.25, "t_loop_us": 16.0, "frac_sol_loop": 0.3125, "host_us": 8.0, "bf16_us": 13.0,
           "speedup": 0.65}
    line = competition.format_row(row, cuda=True)
    assert line.endswith("bf16    13.0 x0.65 (at SOL x2.60)")
