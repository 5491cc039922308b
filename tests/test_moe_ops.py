"""ops.moe_route, ops.moe_sort and ops.moe_combine (csrc/cpu/moe.c, csrc/cuda/moe.cu): the routing
against torch's formulas (softmax, DeepSeek-V3's grouped sigmoid), its ranking of ties and NaN, the
GPU's against the CPU's; the pairs grouped by expert against torch's stable sort, every output
checked; the combine bit for bit against its formula (each product rounded, added in j order) on the
CPU and on a GPU, 16-byte and element paths; ids outside the experts; bad arguments; the ops as torch
citizens."""

import pytest
import torch

import nvfp4_kernels as nk
from conftest import needs_cuda


def torch_route(logits, k, scoring, bias=None, n_group=1, topk_group=1, renormalize=True, scale=1.0):
    """The routing as transformers' routers write it (float32): (weights, ids), ids in rank order."""
    x = logits.float()
    if scoring == "softmax":
        p = x.softmax(-1)
        w, ids = p.topk(k, -1)
        return (w / w.sum(-1, keepdim=True) if renormalize else w) * scale, ids
    s = x.sigmoid()
    c = s if bias is None else s + bias
    if n_group > 1:
        t, e = c.shape
        groups = c.view(t, n_group, -1).topk(min(2, e // n_group), -1)[0].sum(-1)
        keep = torch.zeros_like(groups).scatter_(1, groups.topk(topk_group, -1)[1], 1.0)
        c = c.masked_fill(keep.repeat_interleave(e // n_group, -1) == 0, float("-inf"))
    ids = c.topk(k, -1)[1]
    w = s.gather(1, ids)
    return (w / (w.sum(-1, keepdim=True) + 1e-20) if renormalize else w) * scale, ids


ROUTES = [("softmax", 128, 8, {}), ("softmax", 60, 4, {"renormalize": False}), ("softmax", 8, 2, {"scale": 2.5}),
          ("sigmoid", 256, 8, {"n_group": 8, "topk_group": 4, "bias": True, "scale": 2.5}),  # DeepSeek-V3
          ("sigmoid", 64, 6, {"n_group": 32, "topk_group": 3, "bias": True}),  # runs of 2 experts
          ("sigmoid", 16, 3, {"n_group": 16, "topk_group": 16}),  # runs of one
          ("sigmoid", 2048, 32, {"renormalize": False}), ("softmax", 1, 1, {}),
          ("softmax", 250, 8, {}),  # lanes holding 7 or 8 experts' ranks (the GPU holds up to 256 in registers)
          ("sigmoid", 288, 8, {"n_group": 8, "topk_group": 3, "bias": True})]  # past 256: the search a round


@pytest.mark.parametrize("scoring,e,k,kw", ROUTES, ids=[f"{r[0]}-{r[1]}-{r[2]}-{len(r[3])}" for r in ROUTES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_route_matches_torch(device, gen, scoring, e, k, kw, dtype):
    """Random logits (no ties): the same experts in the same order as torch's topk, weights within a
    float32 rounding or two (exp and the sum's order)."""
    t = 37
    if dtype == torch.float32:  # permuted even steps: sigmoids of neighbours differ by far more than exp's rounding
        grid = torch.linspace(-3, 3, e) * (3 if scoring == "softmax" else 1)
        logits = torch.stack([grid[torch.randperm(e, generator=gen)] for _ in range(t)])
    else:  # distinct bf16 values (random ones tie often), 2^-6 <= |x| < 8: their sigmoids differ too
        grid = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
        grid = grid[(grid.float().abs() >= 2.0**-6) & (grid.float().abs() < 8)]
        logits = torch.stack([grid[torch.randperm(grid.numel(), generator=gen)[:e]] for _ in range(t)])
    kw = dict(kw)
    bias = torch.randn(e, generator=gen) * 0.1 if kw.pop("bias", False) else None
    w, ids = nk.moe_route(logits.to(device), k, scoring=scoring, bias=None if bias is None else bias.to(device), **kw)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == ids.shape == (t, k)
    want_w, want_ids = torch_route(logits, k, scoring, bias, **kw)
    assert torch.equal(ids.cpu().long(), want_ids)
    torch.testing.assert_close(w.cpu(), want_w, rtol=1e-6, atol=1e-7)
    if device == "cuda":  # the GPU's against the CPU's: the same experts; weights but for exp's last bits
        w_cpu, ids_cpu = nk.moe_route(logits, k, scoring=scoring, bias=bias, **kw)
        assert torch.equal(ids.cpu(), ids_cpu)
        torch.testing.assert_close(w.cpu(), w_cpu, rtol=1e-6, atol=1e-7)


def test_moe_route_ranking(device):
    """Equal scores rank by the lower index; NaN after every number (torch's topk ranks NaN first);
    a token of all-equal logits takes experts 0 .. k-1 with equal weights."""
    nan = float("nan")
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [nan, 0.0, nan, -1.0, 5.0], [0.5] * 5])
    w, ids = nk.moe_route(logits.to(device), 3)
    assert ids.cpu().tolist()[0] == [1, 2, 4] and ids.cpu().tolist()[2] == [0, 1, 2]
    assert ids.cpu().tolist()[1][:2] == [4, 1]  # the numbers first; a NaN third
    torch.testing.assert_close(w.cpu()[2], torch.full((3,), 1 / 3))
    _, ids = nk.moe_route(torch.zeros(2, 8, device=device), 2, scoring="sigmoid", n_group=4, topk_group=2)
    assert ids.cpu().tolist() == [[0, 1], [0, 1]]


def test_moe_route_bad_arguments(device):
    x = torch.zeros(3, 8, device=device)
    with pytest.raises(TypeError, match="logits must be float32, float16 or bfloat16"):
        nk.moe_route(x.int(), 2)
    with pytest.raises(ValueError, match=r"logits must be \[T, num_experts\]"):
        nk.moe_route(x[0], 2)
    with pytest.raises(ValueError, match=r"num_experts must be in \[1, 2048\]"):
        nk.moe_route(torch.zeros(1, 2049, device=device), 2)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, min\(32, 8 competing experts\)\]"):
        nk.moe_route(x, 9)
    with pytest.raises(ValueError, match=r"top_k must be in \[1, min\(32, 4 competing experts\)\]"):
        nk.moe_route(x, 5, scoring="sigmoid", n_group=4, topk_group=2)
    with pytest.raises(ValueError, match="n_group must divide num_experts"):
        nk.moe_route(x, 2, scoring="sigmoid", n_group=3)
    with pytest.raises(ValueError, match="expert groups go with sigmoid scoring"):
        nk.moe_route(x, 2, n_group=2)
    with pytest.raises(ValueError, match="a correction bias goes with sigmoid scoring"):
        nk.moe_route(x, 2, bias=torch.zeros(8, device=device))
    with pytest.raises(ValueError, match=r"bias must be \[num_experts = 8\]"):
        nk.moe_route(x, 2, scoring="sigmoid", bias=torch.zeros(7, device=device))
    with pytest.raises(TypeError, match="bias must be float32"):
        nk.moe_route(x, 2, scoring="sigmoid", bias=torch.zeros(8, device=device).half())
    with pytest.raises(ValueError, match="scoring must be 'softmax' or 'sigmoid'"):
        nk.moe_route(x, 2, scoring="relu")
    with pytest.raises(ValueError, match="scale must be finite"):
        nk.moe_route(x, 2, scale=float("inf"))
    w, ids = nk.moe_route(torch.zeros(0, 8, device=device), 2)
    assert w.shape == ids.shape == (0, 2)


def expected_sort(ids, e):
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    row_of_pair = torch.empty_like(order)
    row_of_pair[order] = torch.arange(flat.numel())
    offs = torch.bincount(flat, minlength=e).cumsum(0)
    return order // ids.shape[1], flat[order], row_of_pair.view(ids.shape), offs


@pytest.mark.parametrize("t,k,e", [(1, 1, 1), (1, 8, 256), (5, 3, 8), (33, 2, 7), (1000, 8, 300), (0, 4, 16),
                                   (700, 6, 8192), (64, 1, 3), (4096, 8, 256), (2001, 8, 384), (9, 8, 1500),
                                   (1024, 8, 40), (9000, 8, 40), (32768, 8, 128), (1100, 8, 1400)])
@pytest.mark.parametrize("ids_dtype", [torch.int64, torch.int32])
def test_moe_sort_matches_stable_sort(device, gen, t, k, e, ids_dtype):
    """Random ids (a few experts crowded, many empty where e is large), rows in expert order and pair
    order within one; every output against torch's stable sort."""
    hot = torch.randint(0, e, (max(1, e // 10),), generator=gen)
    ids = torch.where(torch.rand(t, k, generator=gen) < 0.5, hot[torch.randint(0, hot.numel(), (t, k), generator=gen)],
                      torch.randint(0, e, (t, k), generator=gen)).to(ids_dtype)
    token_of_row, expert_of_row, row_of_pair, offs = nk.moe_sort(ids.to(device), e)
    for got in (token_of_row, expert_of_row, row_of_pair, offs):
        assert got.dtype == torch.int32 and got.device.type == device
    want = expected_sort(ids, e)
    assert token_of_row.shape == (t * k,) and row_of_pair.shape == (t, k) and offs.shape == (e,)
    for name, got, w in zip(("token_of_row", "expert_of_row", "row_of_pair", "offs"),
                            (token_of_row, expert_of_row, row_of_pair, offs), want):
        assert torch.equal(got.cpu().long(), w), name


def combine_formula(y, row_of_pair, weights):
    """sum_j w[t, j] * y[row[t, j]] in float32: each product rounded, added in j order to 0; -1 skipped."""
    out = torch.zeros(row_of_pair.shape[0], y.shape[1], dtype=torch.float32)
    for j in range(row_of_pair.shape[1]):
        rows = row_of_pair[:, j].long()
        ok = rows >= 0
        prod = weights[:, j:j + 1].float() * y[rows.clamp(min=0)].float()
        out = torch.where(ok[:, None], out + prod, out)
    return out.to(y.dtype)


@pytest.mark.parametrize("y_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t,k,h,misaligned", [(1, 8, 2048, False), (7, 3, 64, False), (5, 2, 37, False),
                                              (9, 4, 64, True), (0, 2, 16, False), (3, 1, 8, False)])
def test_moe_combine_matches_formula(device, gen, y_dtype, w_dtype, t, k, h, misaligned):
    rows = t * k + 3
    y = (torch.randn(rows, h, generator=gen) * 4).to(y_dtype)
    y[0, 0] = float("nan") if rows and h else 0.0
    row_of_pair = torch.randperm(rows, generator=gen)[:t * k].view(t, k).int()
    if t:
        row_of_pair[0, -1] = -1  # a pair without a row adds nothing
    weights = torch.rand(t, k, generator=gen).to(w_dtype)
    want = combine_formula(y, row_of_pair, weights)
    yd = y.to(device)
    if misaligned:  # contiguous, but 2 or 4 bytes past a 16-byte boundary: the element path
        buf = torch.empty(rows * h + 1, dtype=y_dtype, device=device)
        yd = buf[1:].view(rows, h)
        yd.copy_(y)
    got = nk.moe_combine(yd, row_of_pair.to(device), weights.to(device))
    assert got.dtype == y_dtype and got.shape == (t, h) and got.device.type == device
    assert torch.equal(got.cpu().float().nan_to_num(1234.5), want.float().nan_to_num(1234.5))


def test_moe_ids_outside_the_experts(device):
    """CPU: an error naming the range. CUDA (no sync to check): such a pair gets no row (-1) and adds
    nothing; offs count the others; the rows past them gather token 0 safely."""
    ids = torch.tensor([[0, 5], [2, -1], [1, 2]], device=device)
    if device == "cpu":
        with pytest.raises(ValueError, match=r"ids must lie in \[0, num_experts = 3\)"):
            nk.moe_sort(ids, 3)
        return
    token_of_row, expert_of_row, row_of_pair, offs = (v.cpu() for v in nk.moe_sort(ids, 3))
    assert offs.tolist() == [1, 2, 4]
    assert row_of_pair.tolist() == [[0, -1], [2, -1], [1, 3]]
    assert token_of_row.tolist() == [0, 2, 1, 2, 0, 0] and expert_of_row.tolist() == [0, 1, 2, 2, 0, 0]
    y = torch.arange(6 * 8, dtype=torch.float32, device=device).view(6, 8)
    out = nk.moe_combine(y, row_of_pair.to(device), torch.ones(3, 2, device=device))
    assert torch.equal(out.cpu(), torch.stack([y[0], y[2], y[1] + y[3]]).cpu())


@pytest.mark.parametrize("t,k,e", [(7, 2, 5), (2048, 8, 64)])
def test_moe_sort_ids_outside_many_pairs(device, gen, t, k, e):
    """Ids outside [0, e) among many pairs (from 8192 the CUDA sort runs several CTAs): the others
    sorted stably, those pairs without a row, the rows past offs[-1] token 0 and expert 0."""
    ids = torch.randint(0, e, (t, k), generator=gen)
    bad = torch.rand(t, k, generator=gen) < 0.1
    bad[0, 0] = bad[-1, -1] = True  # at least one (the CPU's error); -1 and e both
    ids[bad] = torch.where(torch.rand(t, k, generator=gen) < 0.5, -1, e)[bad]
    ids[0, 0], ids[-1, -1] = -1, e
    if device == "cpu":
        with pytest.raises(ValueError, match=r"ids must lie in \[0, num_experts"):
            nk.moe_sort(ids, e)
        return
    token_of_row, expert_of_row, row_of_pair, offs = (v.cpu().long() for v in nk.moe_sort(ids.to(device), e))
    flat = ids.reshape(-1)
    ok = (flat >= 0) & (flat < e)
    pairs = torch.arange(flat.numel())[ok]
    order = pairs[torch.argsort(flat[ok], stable=True)]
    rows = order.numel()
    assert torch.equal(offs, torch.bincount(flat[ok], minlength=e).cumsum(0))
    assert torch.equal(token_of_row[:rows], order // k) and torch.equal(expert_of_row[:rows], flat[order])
    assert not token_of_row[rows:].any() and not expert_of_row[rows:].any()
    want = torch.full((flat.numel(),), -1, dtype=torch.long)
    want[order] = torch.arange(rows)
    assert torch.equal(row_of_pair.reshape(-1), want)


@needs_cuda
def test_moe_sort_graph_many_pairs(gen):
    """32768 pairs (the several-CTA sort, its scratch from the graph's pool) captured once, replayed
    with new ids: each replay's outputs are those of the stable sort."""
    ids = torch.randint(0, 256, (4096, 8), generator=gen).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        nk.moe_sort(ids, 256)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = nk.moe_sort(ids, 256)
    for hot in (256, 16, 1):  # uniform, crowded, one expert
        ids.copy_(torch.randint(0, hot, (4096, 8), generator=gen).cuda() * (256 // hot))
        graph.replay()
        torch.cuda.synchronize()
        for name, got, want in zip(("token_of_row", "expert_of_row", "row_of_pair", "offs"), outs,
                                   expected_sort(ids.cpu(), 256)):
            assert torch.equal(got.cpu().long(), want), (hot, name)


def test_moe_ops_bad_arguments(device):
    ids = torch.zeros(2, 3, dtype=torch.int64, device=device)
    with pytest.raises(TypeError, match="ids must be int64 or int32"):
        nk.moe_sort(ids.float(), 4)
    with pytest.raises(ValueError, match=r"ids must be \[T, top_k\]"):
        nk.moe_sort(ids[0], 4)
    with pytest.raises(ValueError, match=r"num_experts must be in \[1, 8192\]"):
        nk.moe_sort(ids, 0)
    with pytest.raises(ValueError, match=r"num_experts must be in \[1, 8192\]"):
        nk.moe_sort(ids, 8193)
    y, rows, w = torch.zeros(6, 8, device=device), torch.zeros(2, 3, dtype=torch.int32, device=device), \
        torch.ones(2, 3, device=device)
    with pytest.raises(TypeError, match="y must be float32, float16 or bfloat16"):
        nk.moe_combine(y.int(), rows, w)
    with pytest.raises(TypeError, match="weights must be"):
        nk.moe_combine(y, rows, w.int())
    with pytest.raises(TypeError, match="row_of_pair must be int32"):
        nk.moe_combine(y, rows.long(), w)
    with pytest.raises(ValueError, match=r"y must be \[rows, hidden\]"):
        nk.moe_combine(y[0], rows, w)
    with pytest.raises(ValueError, match=r"weights must be \[T, top_k\]"):
        nk.moe_combine(y, rows, w[:, :2])
    if device == "cpu":  # a row past y: checked where it costs no sync
        with pytest.raises(ValueError, match="row_of_pair must hold rows of y"):
            nk.moe_combine(y, rows + 6, w)


@needs_cuda
def test_moe_ops_one_device():
    ids = torch.zeros(2, 3, dtype=torch.int64, device="cuda")
    with pytest.raises(ValueError, match="one device"):
        nk.moe_combine(torch.zeros(6, 8, device="cuda"), ids.int().cpu(), torch.ones(2, 3, device="cuda"))


def test_moe_ops_torch_citizens(device, gen):
    logits = torch.randn(5, 16, generator=gen).to(device)
    torch.library.opcheck(torch.ops.nvfp4.moe_route.default, (logits, 3))
    torch.library.opcheck(torch.ops.nvfp4.moe_route.default, (logits.bfloat16(), 2, True, torch.zeros(16).to(device),
                                                                4, 2, True, 2.5))
    ids = torch.randint(0, 6, (5, 2), generator=gen).to(device)
    torch.library.opcheck(torch.ops.nvfp4.moe_sort.default, (ids, 6))
    _, _, row_of_pair, _ = nk.moe_sort(ids, 6)
    y = torch.randn(10, 16, generator=gen).bfloat16().to(device)
    torch.library.opcheck(torch.ops.nvfp4.moe_combine.default, (y, row_of_pair, torch.rand(5, 2).to(device)))
