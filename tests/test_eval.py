"""nvfp4_kernels.gpumode.eval (the GPU MODE procedure run locally) and the harness's
statistics and stop rule (nvfp4_kernels.timing). The test mode runs on the CPU
here; a crashing, raising or wrong submission must be reported, not fatal."""

import io
import math

import pytest
import torch

from nvfp4_kernels.gpumode import eval as ev
from nvfp4_kernels.gpumode import tasks
from nvfp4_kernels.testing import within_tolerance
from nvfp4_kernels.gpumode.harness import should_stop, stats
from nvfp4_kernels.timing import geomean

SPEC = """\
tests:
  - {"m": 128, "n": 256, "k": 256, "l": 1, "seed": 1111}
  - {"m": 7, "n": 129, "k": 64, "l": 2, "seed": 5}

benchmarks:
  - {"m": 128, "n": 256, "k": 256, "l": 1, "seed": 1111}
"""


def test_within_tolerance_is_the_competition_rule():
    """1e-3 + 1e-3 |ref|; NaN only against NaN; an infinity only against itself."""
    nan, inf = float("nan"), float("inf")
    ref = torch.tensor([1000.0, 0.0, nan, inf, -inf, 5.0, 2.0]).half()
    out = torch.tensor([1001.0, 0.0009765625, nan, inf, -inf, 5.0, 2.0]).half()
    assert within_tolerance(out, ref).tolist() == [True] * 7
    bad = torch.tensor([1002.0, 0.0029296875, 1.0, 60000.0, inf, nan, inf]).half()
    assert within_tolerance(bad, ref).tolist() == [False] * 7


def test_stats_match_the_harness_formulas():
    s = stats([1.0, 2.0, 3.0, 6.0])
    assert (s.runs, s.mean, s.best, s.worst) == (4, 3.0, 1.0, 6.0)
    assert s.std == pytest.approx(math.sqrt((4 + 1 + 0 + 9) / 3))  # sample std, n - 1
    assert s.err == pytest.approx(s.std / 2)


def test_geomean_is_the_score():
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)
    assert math.isnan(geomean([]))


def test_stop_rule():
    flat = [1000.0] * 3
    assert not should_stop(flat[:2], 5e8, 1e12), "fewer than 3 samples"
    assert not should_stop(flat, 5e7, 1e12), "under 100 ms"
    assert should_stop(flat, 2e8, 1e12), "error of the mean 0 < 0.1%"
    noisy = [1000.0, 2000.0, 1500.0, 900.0]
    assert not should_stop(noisy, 2e8, 1e12)
    assert should_stop(noisy, 2e8, 4000.0), "samples add up past the time limit"
    assert should_stop(noisy, 121e9, 1e12), "two minutes"


def test_shapes_and_costs():
    for p in tasks.PROBLEMS:
        sh = tasks.shapes(p)
        assert len(sh["tests"]) >= 10 and len(sh["benchmarks"]) >= 3
    nbytes, flops = ev.shape_cost("gemm", dict(m=128, n=7168, k=16384, l=1))
    assert flops == 2 * 128 * 7168 * 16384
    assert nbytes == (128 + 7168) * 16384 * 9 // 16 + 2 * 128 * 7168
    g = dict(m=[1, 2], n=[3, 4], k=[64, 128])
    assert ev.shape_cost("group_gemm", g)[1] == 2 * (1 * 3 * 64 + 2 * 4 * 128)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    (d / "spec.yml").write_text(SPEC)
    (d / "wrong.py").write_text("def custom_kernel(data):\n    return data[-1].zero_()\n")
    (d / "raises.py").write_text("def custom_kernel(data):\n    raise RuntimeError('boom')\n")
    (d / "crash.py").write_text("import os\n\ndef custom_kernel(data):\n    os.abort()\n")
    return d


def _run(files, submission):
    out = io.StringIO()
    res = ev.evaluate("test", ("gemm",), str(submission), spec=str(files / "spec.yml"), device="cpu", out=out)
    return res["problems"]["gemm"], out.getvalue()


def test_our_submission_passes_on_cpu(files):
    rows, text = _run(files, ev.DEFAULT_SUBMISSION)
    assert [r["ok"] for r in rows] == [True, True], text
    assert "2 of 2 passed" in text


@pytest.mark.parametrize("name,why", [("wrong.py", "elements off"), ("raises.py", "RuntimeError: boom"),
                                      ("crash.py", "child process died")])
def test_bad_submissions_are_reported(files, name, why):
    rows, text = _run(files, files / name)
    assert [r["ok"] for r in rows] == [False, False], text
    assert all(why in r["error"] for r in rows), text
    assert "0 of 2 passed" in text


def test_cli_exit_status(files, tmp_path):
    js = tmp_path / "r.json"
    args = ["test", "--problem", "gemm", "--spec", str(files / "spec.yml"), "--device", "cpu", "--json", str(js)]
    assert ev.main(args) == 0 and js.exists()
    assert ev.main(args[:-2] + ["--submission", str(files / "wrong.py")]) == 1


def test_benchmark_needs_a_gpu_on_cpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        ev.evaluate("benchmark", ("gemm",), device="cpu")
