"""nvfp4.quantize: every byte equal to reference.quantize (codes and scales, both layouts),
on inputs that reach every scale exponent, the e2m1 ties, saturation and zero blocks; the
inverse of dequantize on exactly representable blocks; the gemm of quantized operands; errors;
and the op as a torch citizen (opcheck, torch.compile, CUDA graphs)."""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.layouts import as_bytes, pack_fp4, unpack_fp4
from conftest import assert_matches, needs_cuda

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def wide_values(shape, gen, dtype):
    """Random values whose 16-blocks span ~2^-40 .. 2^40 in magnitude (scales from 0 and the
    e4m3 subnormals to saturation, depending on the global scale), with zero blocks and zeros."""
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-40, 40, shape, generator=gen).float())
    blocks = x.unflatten(-1, (shape[-1] // 16, 16))
    blocks.mul_(torch.exp2(torch.randint(-20, 20, blocks.shape[:-1], generator=gen).float()).unsqueeze(-1))
    blocks[torch.rand(blocks.shape[:-1], generator=gen) < 0.05] = 0.0  # zero blocks
    x[torch.rand(shape, generator=gen) < 0.05] = 0.0
    x[torch.rand(shape, generator=gen) < 0.05] *= -0.0  # signed zeros
    return x.to(dtype).clamp(-6e4, 6e4) if dtype == torch.float16 else x.to(dtype)


def assert_same_bytes(got, want, what):
    (d, s), (rd, rs) = got, want
    assert d.dtype == torch.uint8 and s.dtype == torch.float8_e4m3fn, f"{what}: dtypes {d.dtype}, {s.dtype}"
    assert d.shape == rd.shape and s.shape == rs.shape, f"{what}: shapes {d.shape} {s.shape} vs {rd.shape} {rs.shape}"
    sb, rsb = as_bytes(s).cpu(), as_bytes(rs).cpu()
    bad = (sb != rsb).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} scales differ, first at {bad[0].tolist()}"
    bad = (d.cpu() != rd.cpu()).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} code bytes differ, first at {bad[0].tolist()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(16,), (1, 48), (7, 1040), (2, 129, 80), (3, 1, 256)])
def test_matches_reference(device, gen, dtype, shape):
    x = wide_values(shape, gen, dtype)
    for layout in ("linear", "blocked"):
        for g in (None, 0.37, 2.0**20, torch.tensor(3.0e-4), torch.tensor(5.5, device=device)):
            got = nk.quantize(x.to(device), global_scale=g, sf_layout=layout)
            want = reference.quantize(x, g.cpu() if isinstance(g, torch.Tensor) else g, layout)
            assert_same_bytes(got, want, f"{dtype} {shape} {layout} g={g} on {device}")


@needs_cuda
def test_matches_reference_on_wide_launches(gen):
    """Launches with enough 128-column items that each lane takes four blocks (csrc/cuda/quantize.cu,
    PER = 4: its own unrolled copy of the block code), K with a partial last item, non-finite values."""
    rows = torch.cuda.get_device_properties(0).multi_processor_count * 32 + 5  # 2 items a row: 64 warps an SM
    for dtype in DTYPES:
        x = wide_values((rows, 2064), gen, dtype)
        x[::97, 3], x[5::101, 40], x[7::89, 2063] = float("nan"), float("inf"), -float("inf")
        x = x.cuda()
        for layout in ("linear", "blocked"):
            got = nk.quantize(x, global_scale=0.37, sf_layout=layout)
            assert_same_bytes(got, reference.quantize(x, 0.37, layout), f"{dtype} {rows} x 2064 {layout}")


def test_every_scale_and_tie(device):
    """Block maxima at 6 x every e4m3 value, the midpoints between neighbours and one ulp either
    side (round to nearest even, subnormals, saturation at 448 and past 464); then, at scale 1,
    every e2m1 tie and its neighbours, signed."""
    e4m3 = torch.arange(0, 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn).float().unique()
    mids = (e4m3[1:] + e4m3[:-1]) / 2
    big = torch.full_like(mids, 1e9)
    t = torch.cat([e4m3, mids, torch.nextafter(mids, big), torch.nextafter(mids, torch.zeros_like(mids)),
                   torch.tensor([448.0, 464.0, 463.99, 464.01, 480.0, 1e30, 2.0**-10, 3 * 2.0**-11, 1e-30])])
    # and maxima 1-3 ulp either side of 6 x each midpoint, where fp32(amax / 6) and
    # fp32(amax * fp32(1 / 6)) round to different e4m3 neighbours
    six_mids = (mids[mids > 0] * 6).view(torch.int32)
    near = torch.cat([six_mids + d for d in (-3, -2, -1, 1, 2, 3)]).view(torch.float32)
    amax = torch.cat([t * 6, near])
    x = amax[:, None] * torch.linspace(-1, 1, 16)
    x[:, 5] = amax
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    vals = torch.cat([ties, torch.nextafter(ties, ties + 1), torch.nextafter(ties, ties - 1),
                      torch.tensor([0.0, 0.5, 1, 1.5, 2, 3, 4, 6, 1e-6, 1e-30, 5.99])])  # |x| <= 6: scale 1
    vals = torch.cat([vals, -vals])
    rows = torch.zeros(-(-vals.numel() // 15) * 15)
    rows[: vals.numel()] = vals
    y = torch.cat([torch.full((rows.numel() // 15, 1), 6.0), rows.view(-1, 15)], 1)
    for z in (x, y):
        for layout in ("linear", "blocked"):
            want = reference.quantize(z, None, layout)
            assert_same_bytes(nk.quantize(z.to(device), sf_layout=layout), want, f"{layout} on {device}")
            assert_same_bytes(reference.quantize(z.to(device), None, layout), want, f"reference on {device}")
    codes = unpack_fp4(nk.quantize(y.to(device))[0]).cpu()[:, 1:].flatten()[: vals.numel()]
    want = [0, 2, 2, 4, 4, 6, 6]  # the ties, to the even code
    assert codes[:7].tolist() == want and codes[32:39].tolist() == [c | 8 for c in want]


def test_non_finite_values(device, gen):
    """A NaN gives its block a NaN scale (NaN when decoded), +-inf saturates; other blocks as usual."""
    x = wide_values((3, 64), gen, torch.float32)
    x[0, 5], x[1, 17], x[1, 40], x[2, 63] = float("nan"), float("inf"), -float("inf"), float("nan")
    x[2, 62] = -float("inf")
    for layout in ("linear", "blocked"):
        got = nk.quantize(x.to(device), global_scale=0.25, sf_layout=layout)
        assert_same_bytes(got, reference.quantize(x, 0.25, layout), f"non-finite, {layout}, on {device}")
    d, s = nk.quantize(x.to(device))
    deq = reference.dequantize(d.cpu(), s.cpu())
    assert deq[0, :16].isnan().all() and deq[2, 48:].isnan().all() and not deq[0, 16:].isnan().any()
    assert deq[1, 17] == 6 * 448 and deq[1, 40] == -6 * 448


def test_inverse_of_dequantize(device, gen):
    """Blocks holding a +-6 code decode to values that quantize back to the same bytes."""
    codes = torch.randint(0, 16, (2, 37, 160), generator=gen, dtype=torch.uint8)
    codes[..., torch.randint(0, 16, (1,), generator=gen).item() :: 16] = 7 | (8 * torch.randint(0, 2, (1,), generator=gen).item())
    data = pack_fp4(codes)
    sf = torch.randint(1, 0x7F, (2, 37, 10), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn)
    x = reference.dequantize(data, sf).float()
    d, s = nk.quantize(x.to(device))
    assert torch.equal(d.cpu(), data) and torch.equal(as_bytes(s).cpu(), as_bytes(sf))


def test_blocked_padding_is_zero(device, gen):
    x = wide_values((130, 80), gen, torch.float32).to(device)
    _, s = nk.quantize(x, sf_layout="blocked")
    full = as_bytes(s).cpu().permute(0, 3, 2, 1, 4).reshape(256, 8)  # [rb, i4, i32, kb4, j4] -> rows x columns
    assert (full[130:] == 0).all() and (full[:, 5:] == 0).all()


def test_strided_input(device, gen):
    big = wide_values((3, 40, 96), gen, torch.bfloat16).to(device)
    x = big[::2, 3:20, 32:]  # row and batch strides of the parent, K contiguous
    assert_same_bytes(nk.quantize(x, global_scale=2.5), reference.quantize(x.cpu(), 2.5), f"view on {device}")
    for dtype in DTYPES:  # rows 8 bytes off 16-byte alignment (the kernel's scalar loads)
        y = wide_values((5, 64), gen, dtype).to(device)[:, 4:52]
        assert_same_bytes(nk.quantize(y, sf_layout="blocked"), reference.quantize(y.cpu(), None, "blocked"),
                          f"unaligned {dtype} on {device}")


def test_empty_rows(device):
    d, s = nk.quantize(torch.zeros(0, 64, device=device), sf_layout="blocked")
    assert d.shape == (0, 32) and s.shape == (0, 1, 32, 4, 4)
    d, s = nk.quantize(torch.zeros(2, 0, 64, device=device))
    assert d.shape == (2, 0, 32) and s.shape == (2, 0, 4)


@pytest.mark.parametrize("layout", ["linear", "blocked"])
def test_gemm_of_quantized_operands(device, gen, layout):
    """gemm(quantize(x), quantize(w), alpha = 1 / (gx gw)): the reference's result on those bytes,
    and x @ w^T to within NVFP4's error (Gaussian values: ~10% RMS per operand, ~14% on the
    product; a wrong alpha or scale convention is off by orders of magnitude)."""
    x = torch.randn(2, 70, 512, generator=gen)
    w = torch.randn(2, 136, 512, generator=gen) * 0.02
    gx, gw = 448 * 6 / x.abs().max(), 448 * 6 / w.abs().max()
    xq = nk.quantize(x.to(device).bfloat16(), global_scale=gx.item(), sf_layout=layout)
    wq = nk.quantize(w.to(device).bfloat16(), global_scale=gw.to(device), sf_layout=layout)
    alpha = (1 / (gx * gw)).reshape(1).to(device)
    c = nk.gemm(xq[0], wq[0], xq[1], wq[1], alpha=alpha)
    assert_matches(c, reference.gemm(xq[0].cpu(), wq[0].cpu(), xq[1].cpu(), wq[1].cpu(), alpha.cpu()), f"{device}")
    exact = x.bfloat16().double() @ w.bfloat16().double().transpose(-1, -2)
    err = (c.cpu().double() - exact).norm() / exact.norm()
    assert err < 0.2, f"relative error {err:.3f} of the quantized gemm on {device}"


def test_errors(device):
    x = torch.randn(4, 64, device=device)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        nk.quantize(x.to(torch.int32))
    with pytest.raises(ValueError, match="multiple of 16"):
        nk.quantize(x[:, :40])
    with pytest.raises(ValueError, match="contiguous along K"):
        nk.quantize(torch.randn(64, 4, device=device).t())
    with pytest.raises(ValueError, match=r"\[K\], \[R, K\] or \[L, R, K\]"):
        nk.quantize(x.view(1, 1, 4, 64))
    with pytest.raises(TypeError, match="global_scale must be a float32"):
        nk.quantize(x, global_scale=torch.tensor(2.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="one value"):
        nk.quantize(x, global_scale=torch.ones(2))
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="finite and positive"):  # as a tensor: the op's own check
            nk.quantize(x, global_scale=torch.tensor(bad))
        with pytest.raises(ValueError, match=r"global_scale=.* (must be positive|is outside float32's range)"):
            nk.quantize(x, global_scale=bad)
    with pytest.raises(ValueError, match="sf_layout"):
        nk.quantize(x, sf_layout="row")


@needs_cuda
def test_global_scale_on_another_device():
    with pytest.raises(ValueError, match="global_scale is on"):
        nk.quantize(torch.randn(4, 64), global_scale=torch.ones(1, device="cuda"))


def test_torch_citizen(device, gen):
    x = wide_values((2, 33, 96), gen, torch.bfloat16).to(device)
    g = torch.tensor(0.75, device=device)
    torch.library.opcheck(torch.ops.nvfp4.quantize.default, (x, g, False))
    torch.library.opcheck(torch.ops.nvfp4.quantize.default, (x[0], None, True))

    def f(x, g):
        d, s = nk.quantize(x, global_scale=g, sf_layout="blocked")
        return d, s.view(torch.uint8)

    got, want = torch.compile(f, fullgraph=True)(x, g), f(x, g)
    assert all(torch.equal(a, b) for a, b in zip(got, want)), f"compiled quantize differs from eager on {device}"


@needs_cuda
def test_cuda_graph(gen):
    x = wide_values((5, 256), gen, torch.float16).cuda()
    g = torch.tensor(1.5, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        d, s = nk.quantize(x, global_scale=g)
    for scale in (1.5, 1e-3):
        x.copy_(wide_values((5, 256), gen, torch.float16))
        g.fill_(scale)
        graph.replay()
        assert_same_bytes((d, s), reference.quantize(x.cpu(), scale), f"graph replay, g={scale}")


# ---- quantized_values: the values the codes and scales stand for, in x's dtype -------------------
def assert_same_values(got, want, what):
    """Bit for bit (signed zeros too), NaN where want is NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)}"
    assert got.is_contiguous(), f"{what}: not contiguous"
    g, w = got.cpu(), want.cpu()
    nan = torch.isnan(w)
    assert torch.equal(torch.isnan(g), nan), f"{what}: NaN at other places"
    ints = {2: torch.int16, 4: torch.int32}[g.element_size()]
    bad = ((g.view(ints) != w.view(ints)) & ~nan).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} values differ, first at {bad[0].tolist()}"


def per_row_scales(shape, gen, device):
    e = torch.randint(-12, 12, shape, generator=gen).float() + torch.rand(shape, generator=gen)
    return torch.exp2(e).to(device)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(16,), (1, 48), (7, 1040), (2, 129, 80), (3, 1, 256)])
def test_quantized_values_match_reference(device, gen, dtype, shape):
    """Against reference.quantized_values (dequantize of quantize, exact) and against the codes and
    scales quantize writes, for one global scale and for one per row; NaN and inf in the input."""
    x = wide_values(shape, gen, dtype)
    x.view(-1)[::37] = float("nan")
    x.view(-1)[5::41] = float("inf")
    scales = [None, 0.37, torch.tensor(3.0e-4), torch.tensor(5.5, device=device)]
    if len(shape) >= 2:
        scales.append(per_row_scales(shape[:-1], gen, device))
    for g in scales:
        got = nk.quantized_values(x.to(device), global_scale=g)
        g_cpu = g.cpu() if isinstance(g, torch.Tensor) else g
        want = reference.quantized_values(x, g_cpu)
        assert_same_values(got, want, f"{dtype} {shape} g={g} on {device}")
        if g is None or not isinstance(g, torch.Tensor) or g.numel() == 1:
            d, s = nk.quantize(x.to(device), global_scale=g)
            d, s = d.cpu().reshape(-1, d.shape[-1]), s.cpu().reshape(-1, s.shape[-1])
            assert_same_values(got, reference.dequantize(d, s, dtype).reshape(shape), "vs quantize")


def test_quantized_values_rows_alone(device, gen):
    """Each row with its own global scale is that row quantized alone (rows of a batch too), and
    strided rows (not 16-byte aligned) read as contiguous ones."""
    x = wide_values((2, 9, 160), gen, torch.bfloat16).to(device)
    g = per_row_scales((2, 9), gen, device)
    got = nk.quantized_values(x, global_scale=g)
    for b in range(2):
        for r in range(9):
            assert_same_values(got[b, r], nk.quantized_values(x[b, r], global_scale=g[b, r].reshape(())),
                               f"row {b}, {r}")
    strided = wide_values((9, 192), gen, torch.float16).to(device)[:, 8:-24]
    assert_same_values(nk.quantized_values(strided, global_scale=g[0]),
                       nk.quantized_values(strided.contiguous(), global_scale=g[0]), "strided rows")


@needs_cuda
def test_quantized_values_wide_launch(gen):
    """Enough 128-column items that each lane takes four blocks (quantize.cu, PER = 4)."""
    rows = torch.cuda.get_device_properties(0).multi_processor_count * 32 + 5
    for dtype in DTYPES:
        x = wide_values((rows, 2064), gen, dtype)
        x[::97, 3], x[7::89, 2063] = float("nan"), -float("inf")
        g = per_row_scales((rows,), gen, "cpu")
        assert_same_values(nk.quantized_values(x.cuda(), global_scale=g.cuda()), reference.quantized_values(x, g),
                           f"{dtype} {rows} x 2064")


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_values_gathered(device, gen, dtype):
    """row_index and scale_index (a mixture of experts' rows: each its token's activation with its
    expert's global scale) against the reference of the gathered rows and scales, bit for bit: rows
    repeated and skipped, every row of a table, NaN and inf in the input, no rows."""
    x = wide_values((13, 1040), gen, dtype)
    x.view(-1)[::53] = float("nan")
    x.view(-1)[7::61] = -float("inf")
    table = per_row_scales((5,), gen, "cpu")
    row_index = torch.randint(0, 13, (29,), generator=gen, dtype=torch.int32)
    scale_index = torch.randint(0, 5, (29,), generator=gen, dtype=torch.int32)
    dev = lambda t: t.to(device)  # noqa: E731
    got = nk.quantized_values(dev(x), global_scale=dev(table), row_index=dev(row_index), scale_index=dev(scale_index))
    assert_same_values(got, reference.quantized_values(x[row_index.long()], table[scale_index.long()]), "both")
    got = nk.quantized_values(dev(x), global_scale=0.37, row_index=dev(row_index))
    assert_same_values(got, reference.quantized_values(x[row_index.long()], 0.37), "rows, one scale")
    got = nk.quantized_values(dev(x), global_scale=dev(table), scale_index=dev(scale_index[:13]))
    assert_same_values(got, reference.quantized_values(x, table[scale_index[:13].long()]), "scales alone")
    none = torch.zeros(0, dtype=torch.int32)
    assert nk.quantized_values(dev(x), row_index=dev(none)).shape == (0, 1040)
    if device == "cuda":  # an index outside its range: that row NaN, nothing read outside (no sync to check)
        bad = dev(torch.tensor([0, 13, -1, 2], dtype=torch.int32))
        got = nk.quantized_values(dev(x), global_scale=dev(table), row_index=bad,
                                  scale_index=dev(torch.tensor([0, 1, 2, 5], dtype=torch.int32))).cpu()
        assert torch.isnan(got[1:]).all(), "a row of an index outside its range not NaN"
        assert_same_values(got[:1], reference.quantized_values(x[:1], table[:1]), "the row in range beside them")


def test_quantized_values_gathered_errors(device):
    x = torch.randn(4, 64, device=device)
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
    table = torch.ones(3, device=device)
    with pytest.raises(TypeError, match="row_index must be int32"):
        nk.quantized_values(x, row_index=i32(0, 1).long())
    with pytest.raises(ValueError, match="scale_index must be a contiguous 1-D"):
        nk.quantized_values(x, global_scale=table, scale_index=i32(0, 1, 2, 0, 1, 2, 0, 1).view(4, 2))
    with pytest.raises(ValueError, match=r"with row_index, x must be \[rows, K\]"):
        nk.quantized_values(x[None], row_index=i32(0))
    with pytest.raises(ValueError, match=r"scale_index must hold one index per row \(2\), got 4"):
        nk.quantized_values(x, global_scale=table, row_index=i32(0, 1), scale_index=i32(0, 0, 0, 0))
    with pytest.raises(ValueError, match="scale_index needs a global_scale table"):
        nk.quantized_values(x, scale_index=i32(0, 0, 0, 0))
    with pytest.raises(ValueError, match="scale_index needs a global_scale table"):
        nk.quantized_values(x, global_scale=0.5, scale_index=i32(0, 0, 0, 0))
    with pytest.raises(ValueError, match="with scale_index, global_scale must be a contiguous 1-D table"):
        nk.quantized_values(x, global_scale=torch.ones(2, 2, device=device), scale_index=i32(0, 0, 0, 0))
    with pytest.raises(ValueError, match="with row_index, global_scale is one value, or a table"):
        nk.quantized_values(x, global_scale=torch.ones(4, device=device), row_index=i32(0, 1, 2, 3))
    if device == "cpu":  # host memory: ranges checked
        with pytest.raises(ValueError, match=r"row_index must lie in \[0, 4\) \(x's rows\), got 0 .. 4"):
            nk.quantized_values(x, row_index=i32(0, 4))
        with pytest.raises(ValueError, match=r"scale_index must lie in \[0, 3\)"):
            nk.quantized_values(x, global_scale=table, scale_index=i32(0, 1, 3, 0))
        with pytest.raises(ValueError, match="finite and positive"):
            nk.quantized_values(x, global_scale=torch.tensor([1.0, 0.0]), scale_index=i32(0, 0, 0, 0))
    if device == "cuda":
        with pytest.raises(ValueError, match="row_index is on"):
            nk.quantized_values(x, row_index=torch.tensor([0], dtype=torch.int32))


def test_quantized_values_errors(device):
    x = torch.randn(4, 64, device=device)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        nk.quantized_values(x.to(torch.int32))
    with pytest.raises(ValueError, match="multiple of 16"):
        nk.quantized_values(x[:, :40])
    with pytest.raises(ValueError, match=r"one value or one per row \(x.shape\[:-1\] = \[4\]\), got shape \[5\]"):
        nk.quantized_values(x, global_scale=torch.ones(5, device=device))
    with pytest.raises(ValueError, match=r"one per row"):
        nk.quantized_values(x, global_scale=torch.ones(4, 1, device=device))
    with pytest.raises(ValueError, match=r"x.shape\[:-1\] = \[\]\), got shape \[2\]"):  # a vector [K]: one row
        nk.quantized_values(x[0], global_scale=torch.ones(2, device=device))
    with pytest.raises(TypeError, match="global_scale must be a float32"):
        nk.quantized_values(x, global_scale=torch.ones(4, dtype=torch.float64, device=device))
    with pytest.raises(ValueError, match="must be contiguous"):
        nk.quantized_values(x, global_scale=torch.ones(4, 2, device=device)[:, 0])
    with pytest.raises(ValueError, match=r"global_scale=-1.0 must be positive"):
        nk.quantized_values(x, global_scale=-1.0)
    if device == "cpu":  # per row: checked in host memory
        for bad in (0.0, -2.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="finite and positive"):
                nk.quantized_values(x, global_scale=torch.tensor([1.0, bad, 1.0, 1.0]))
    with pytest.raises(ValueError, match="not differentiable"):
        nk.quantized_values(x.requires_grad_())
    if device == "cuda":
        with pytest.raises(ValueError, match="global_scale is on"):
            nk.quantized_values(x.detach(), global_scale=torch.ones(4))


def test_quantized_values_torch_citizen(device, gen):
    x = wide_values((2, 33, 96), gen, torch.bfloat16).to(device)
    g = per_row_scales((2, 33), gen, device)
    torch.library.opcheck(torch.ops.nvfp4.quantized_values.default, (x, g))
    torch.library.opcheck(torch.ops.nvfp4.quantized_values.default, (x[0], torch.tensor(0.75)))
    rows = torch.tensor([3, 0, 3, 32], dtype=torch.int32, device=device)
    torch.library.opcheck(torch.ops.nvfp4.quantized_values.default, (x[0], g[0], rows, rows % 2))
    f = torch.compile(lambda x, g: nk.quantized_values(x, global_scale=g), fullgraph=True)
    assert torch.equal(f(x, g), nk.quantized_values(x, global_scale=g)), f"compiled differs from eager on {device}"


@needs_cuda
def test_quantized_values_cuda_graph(gen):
    x = wide_values((5, 256), gen, torch.float16).cuda()
    g = torch.ones(5, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = nk.quantized_values(x, global_scale=g)
    for _ in range(2):
        x.copy_(wide_values((5, 256), gen, torch.float16))
        g.copy_(per_row_scales((5,), gen, "cpu"))
        graph.replay()
        assert_same_values(out, reference.quantized_values(x.cpu(), g.cpu()), "graph replay")
