"""The competition demo (benchmarks/competition.py): its --groups option
parsed, run through submission.custom_kernel and checked against the
reference like the task's shapes (on the CPU here: one call each), and its
output: a column header, a row per shape with the error against the reference,
a total line."""

import json

import pytest
import torch

from benchmarks import competition


def test_groups_option_runs_and_checks_those_sizes(capsys, tmp_path):
    path = tmp_path / "rows.json"
    assert competition.main(["--groups", "8,24,1x256x512", "--no-bf16", "--json", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("problem "))
    for title in ("shape", "check", "err/tol", "max|err|"):
        assert title in header
    assert "time ms" in header or "t_call us" in header
    row = next(line for line in lines if line.startswith("group_gemm "))
    assert "G=3 [8,24,1]x256x512" in row
    assert row.split()[3] == "ok"
    assert lines.index(header) < lines.index(row)
    assert lines[-1].startswith("total: 1 rows checked, all ok;")
    assert " wall " in lines[-1]
    saved = json.loads(path.read_text())
    assert saved["total"]["rows"] == 1 and saved["total"]["failed"] == []
    err = saved["rows"][0]["worst_err_over_tol"]
    assert 0 <= err <= 1 and saved["rows"][0]["max_abs_err"] >= 0


def test_group_rows_show_every_groups_sizes():
    shape = {"m": [96, 128], "n": [128, 256], "k": [256, 512]}
    assert competition.describe("group_gemm", shape) == "G=2 96x128x256 128x256x512"
    assert competition.describe("gemv", {"m": 7168, "k": 16384, "l": 4}) == "7168x1x16384 L=4"


@pytest.mark.parametrize("spec", ["8,24x256", "8,ax256x512", "x256x512"])
def test_groups_option_rejects_malformed_sizes(spec, capsys):
    with pytest.raises(SystemExit):
        competition.main(["--groups", spec, "--no-bf16"])
    assert "expected M1,M2,...xNxK" in capsys.readouterr().err


GPU_ROW = {"problem": "gemm", "shape": "128x7168x2048 L=1", "ok": True, "t_call_us": 20.0, "sol_us": 5.0,
           "frac_sol": 0.25, "t_loop_us": 16.0, "frac_sol_loop": 0.3125, "host_us": 8.0, "bf16_us": 13.0,
           "speedup": 0.65, "worst_err_over_tol": 0.25, "max_abs_err": 1.5e-3}


def test_row_shows_the_speedup_at_the_speed_of_light():
    """The bound a speedup target has to fit under: bf16 time over SOL time."""
    line = competition.format_row(GPU_ROW, cuda=True)
    assert "bf16    13.0 x0.65 (at SOL x2.60)" in line


def test_gpu_header_lines_up_with_its_rows():
    """Each column title ends where its cell ends, the error columns last."""
    header, line = competition.header(cuda=True, shape_width=30), competition.format_row(GPU_ROW, True, 30)
    assert len(header) == len(line)
    assert header.endswith("err/tol  max|err|") and line.endswith("0.250  1.50e-03")
    assert header.index("t_call us") + len("t_call us") == line.index(" us SOL") + len(" us")


def test_total_line_counts_the_failures():
    rows = [GPU_ROW, dict(GPU_ROW, ok=False, worst_err_over_tol=float("nan"))]
    line = competition.total_line(competition.totals(rows, 12.0), cuda=True)
    assert line.startswith("total: 2 rows checked, 1 FAILED (gemm 128x7168x2048 L=1);")
    assert "worst err/tol nan" in line and line.endswith("wall 12.0 s")


def test_bench_models_arguments():
    """benchmarks/bench_models.py: its token list parsed; without a GPU it says so (and runs nothing)."""
    from benchmarks import bench_models

    with pytest.raises(SystemExit):
        bench_models.main(["--m", "1,x"])
    assert [n for n, *_ in bench_models.MODELS["8b"]] == ["qkv", "o", "gate_up", "down"]
    assert bench_models.weight_bytes(16, 64, "w4a16") == 16 * (32 + 4)


def test_bench_moe_baselines_agree():
    """benchmarks/bench_moe.py: the bf16 baselines (torch._grouped_mm and a loop of F.linear) compute
    the same block, and NVFP4MoE's routing is the one they use; bad token lists are refused."""
    from benchmarks import bench_moe
    from nvfp4_kernels.nn import NVFP4MoE

    with pytest.raises(SystemExit):
        bench_moe.main(["--t", "1,x"])
    gen = torch.Generator().manual_seed(0)
    t, h, i, e, k = 9, 32, 16, 6, 2
    x = torch.randn(t, h, generator=gen).bfloat16()
    logits = torch.randn(t, e, generator=gen)
    w13 = (torch.randn(e, 2 * i, h, generator=gen) * 0.2).bfloat16()
    w2 = (torch.randn(e, h, i, generator=gen) * 0.2).bfloat16()
    _, _, _, offs = bench_moe.grouping(logits, k)
    sizes = torch.diff(offs, prepend=offs.new_zeros(1)).tolist()
    a, b = bench_moe.bf16_block(x, logits, w13, w2, k), bench_moe.bf16_block(x, logits, w13, w2, k, sizes)
    torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    want, got_ids = NVFP4MoE(e, h, i, k).route(logits), logits.softmax(-1).topk(k, -1)[1]
    assert torch.equal(want[1], got_ids)
    assert bench_moe.expert_bytes(2048, 768, "w4a16") == 3 * 2048 * 768 * 9 // 16


@pytest.mark.parametrize("mode", ["w4a16", "w4a4"])
def test_bench_moe_parts(monkeypatch, mode):
    """bench_moe --parts times route, sort, gate/up, down and combine, each over every copy of the experts;
    the stages it times are the block's: composed, they give NVFP4MoE's output."""
    import nvfp4_kernels as nk
    from benchmarks import bench_moe
    from nvfp4_kernels.nn import NVFP4MoE

    timed = []

    def graph_time(calls, replays=20):  # runs each call once (no GPU)
        timed.append(len(calls))
        for c in calls:
            c()
        return 1e-6

    monkeypatch.setattr(bench_moe, "graph_time", graph_time)
    gen = torch.Generator().manual_seed(1)
    t, h, i, e, k = 5, 64, 32, 8, 2
    scales = (torch.full((e,), 0.01), torch.full((e,), 0.01)) if mode == "w4a4" else None
    moes = [NVFP4MoE.from_experts(torch.randn(e, i, h, generator=gen), torch.randn(e, i, h, generator=gen),
                                  torch.randn(e, h, i, generator=gen), k, mode=mode, input_scales=scales)
            for _ in range(2)]
    x, logits = torch.randn(t, h, generator=gen).bfloat16(), torch.randn(t, e, generator=gen)
    parts = bench_moe.parts_time(moes, x, logits, e)
    assert list(parts) == ["route", "sort", "gate_up", "down", "combine"] and timed == [2] * 5
    weights, ids = moes[1].route(logits)
    token_of_row, _, row_of_pair, offs = nk.moe_sort(ids, e)
    y = nk.moe_combine(moes[1]._down(moes[1]._gate_up(x, offs, token_of_row), offs), row_of_pair, weights)
    assert torch.equal(y, moes[1](x, logits))
