"""The ops as torch citizens: opcheck, torch.compile(fullgraph=True), CUDA graph
capture and replay, non-default streams."""

import pytest
import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from conftest import assert_matches, needs_cuda
from helpers import gemm_graph_replays, gemm_problem, gemv_problem, poisoned, ref_gemm, ref_gemv


def _args(gen, device):
    a, b = gemm_problem(2, 33, 17, 96, gen, device, ("blocked", "linear"))
    _, b2 = gemm_problem(2, 1, 17, 96, gen, device)
    a_v, v = gemv_problem(2, 65, 96, gen, device, ("linear", "blocked"))
    ga, gb = gemm_problem(None, 9, 40, 64, gen, device)
    return a, b, b2, a_v, v, ga, gb


def test_opcheck(device, gen):
    a, b, b2, a_v, v, ga, gb = _args(gen, device)
    alpha = torch.tensor(0.5, device=device)
    bias = torch.randn(17, device=device)
    x = torch.randn(2, 33, 96, device=device, dtype=torch.bfloat16)
    bf16 = torch.bfloat16
    cases = [
        (torch.ops.nvfp4.gemm.default, (a.data, b.data, a.sf, b.sf, alpha)),
        (torch.ops.nvfp4.gemm.default, (a.data, b.data, a.sf, b.sf, alpha, bias, bf16)),
        (torch.ops.nvfp4.gemm_out.default, (a.data, b.data, a.sf, b.sf, None, None, poisoned((2, 33, 17), device))),
        (torch.ops.nvfp4.gemm_out.default,
         (a.data, b.data, a.sf, b.sf, None, bias.to(bf16), poisoned((2, 33, 17), device).to(bf16))),
        (torch.ops.nvfp4.gemv.default, (a_v.data, v.data, a_v.sf, v.sf, None)),
        (torch.ops.nvfp4.gemv.default, (a_v.data, v.data, a_v.sf, v.sf, None, bf16)),
        (torch.ops.nvfp4.gemv_out.default, (a_v.data, v.data, a_v.sf, v.sf, alpha, poisoned((2, 65), device))),
        (torch.ops.nvfp4.dual_gemm.default, (a.data, b.data, b2.data, a.sf, b.sf, b2.sf)),
        (torch.ops.nvfp4.dual_gemm.default, (a.data, b.data, b2.data, a.sf, b.sf, b2.sf, alpha, alpha * 3, bf16)),
        (torch.ops.nvfp4.dual_gemm_out.default,
         (a.data, b.data, b2.data, a.sf, b.sf, b2.sf, None, alpha, poisoned((2, 33, 17), device))),
        (torch.ops.nvfp4.group_gemm.default, ([ga.data, a.data[0]], [gb.data, b.data[0]], [ga.sf, a.sf[0]],
                                             [gb.sf, b.sf[0]])),
        (torch.ops.nvfp4.group_gemm.default, ([ga.data, a.data[0]], [gb.data, b.data[0]], [ga.sf, a.sf[0]],
                                             [gb.sf, b.sf[0]], torch.tensor([0.5, 2.0], device=device), bf16)),
        (torch.ops.nvfp4.group_gemm_out.default,
         ([ga.data], [gb.data], [ga.sf], [gb.sf], None, [poisoned((9, 40), device)])),
        (torch.ops.nvfp4.gemm_w4a16.default, (x, b.data, b.sf, alpha, bias)),
        (torch.ops.nvfp4.gemm_w4a16_out.default, (x, b.data, b.sf, None, None, poisoned((2, 33, 17), device))),
        (torch.ops.nvfp4.dual_gemm_w4a16.default, (x, b.data, b2.data, b.sf, b2.sf, alpha, None, torch.float16)),
        (torch.ops.nvfp4.dual_gemm_w4a16_out.default,
         (x, b.data, b2.data, b.sf, b2.sf, None, alpha, poisoned((2, 33, 17), device).to(bf16))),
        (torch.ops.nvfp4.gemm_w4a4.default, (x, b.data, b.sf, alpha * 4, alpha, bias)),
        (torch.ops.nvfp4.gemm_w4a4_out.default, (x, b.data, b.sf, None, None, None, poisoned((2, 33, 17), device))),
        (torch.ops.nvfp4.dual_gemm_w4a4.default, (x, b.data, b2.data, b.sf, b2.sf, torch.tensor(3.0), alpha, None,
                                                  torch.float16)),
        (torch.ops.nvfp4.dual_gemm_w4a4_out.default,
         (x[:, :6], b.data, b2.data, b.sf, b2.sf, None, None, alpha, poisoned((2, 6, 17), device).to(bf16))),
        (torch.ops.nvfp4.pack_bf16_pairs.default, (b.data,)),
        (torch.ops.nvfp4.unpack_bf16_pairs.default, (nk.pack_bf16_pairs(b.data),)),
        (torch.ops.nvfp4.gemm_w4a16.default, (x, nk.pack_bf16_pairs(b.data), b.sf, alpha, bias)),
        (torch.ops.nvfp4.dual_gemm_w4a16.default,
         (x, nk.pack_bf16_pairs(b.data), nk.pack_bf16_pairs(b2.data), b.sf, b2.sf, alpha, None, bf16)),
    ]
    def u8(x):  # opcheck copies and compares arguments, which torch cannot do for fp4/fp8 tensors
        if isinstance(x, list):
            return [u8(t) for t in x]
        byte_types = (torch.float4_e2m1fn_x2, torch.float8_e4m3fn)
        return x.view(torch.uint8) if isinstance(x, torch.Tensor) and x.dtype in byte_types else x

    for op, args in cases:
        torch.library.opcheck(op, tuple(u8(x) for x in args))


def test_torch_compile_fullgraph(device, gen):
    a, b, b2, a_v, v, ga, gb = _args(gen, device)

    x = torch.randn(2, 33, 96, device=device, dtype=torch.bfloat16)
    bias = torch.randn(17, device=device)

    def f(a, b, b2, sfa, sfb, sfb2, av, vv, sfav, sfv, ga, gb, sfga, sfgb, out):
        y = nk.gemm(a, b, sfa, sfb, alpha=0.5)
        z = nk.dual_gemm(a, b, b2, sfa, sfb, sfb2)
        w = nk.gemv(av, vv, sfav, sfv)
        (g,) = nk.group_gemm([ga], [gb], [sfga], [sfgb])
        nk.gemm(a, b, sfa, sfb, out=out)
        e = nk.gemm(a, b, sfa, sfb, alpha=0.5, bias=bias, out_dtype=torch.bfloat16)
        u = nk.dual_gemm(a, b, b2, sfa, sfb, sfb2, alpha1=2.0, alpha2=0.5, out_dtype=torch.bfloat16)
        h = nk.gemm_w4a16(x, b, sfb, alpha=0.25, bias=bias)
        d = nk.dual_gemm_w4a16(x, b, b2, sfb, sfb2, alpha1=0.25)
        q = nk.gemm_w4a4(x, b, sfb, global_scale=2.0, alpha=0.5, bias=bias)
        r = nk.dual_gemm_w4a4(x, b, b2, sfb, sfb2, alpha2=3.0)
        return y.float() * 2, z + 1, w.sum(), g, out, e, u, h, d, q, r

    args = (a.data, b.data, b2.data, a.sf, b.sf, b2.sf, a_v.data, v.data, a_v.sf, v.sf, ga.data, gb.data, ga.sf,
            gb.sf)
    compiled = torch.compile(f, fullgraph=True)
    got = compiled(*args, poisoned((2, 33, 17), device))
    want = f(*args, poisoned((2, 33, 17), device))
    for i, (x, y) in enumerate(zip(got, want)):
        assert torch.equal(x, y), f"compiled output {i} differs from eager on {device}"
    assert_matches(got[4], ref_gemm(a, b), f"compiled out= on {device}")


@needs_cuda
def test_cuda_graph_capture_and_replay(gen):
    dev = "cuda"
    a, b, b2, a_v, v, ga, gb = _args(gen, dev)
    outs = {}
    static = [x.clone() for x in (a.data, b.data, b2.data, a.sf, b.sf, b2.sf, a_v.data, v.data, a_v.sf, v.sf)]
    sa, sb, sb2, ssfa, ssfb, ssfb2, sav, sv, ssfav, ssfv = static
    gout = poisoned((9, 40), dev)
    sx = torch.randn(2, 33, 96, device=dev, dtype=torch.bfloat16)
    alpha, bias = torch.tensor(0.5, device=dev), torch.randn(17, device=dev)

    def body():
        outs["w4a16"] = nk.gemm_w4a16(sx, sb, ssfb, alpha=alpha, bias=bias)
        outs["epilogue"] = nk.dual_gemm(sa, sb, sb2, ssfa, ssfb, ssfb2, alpha1=alpha, alpha2=3.0,
                                        out_dtype=torch.bfloat16)
        outs["gemm"] = nk.gemm(sa, sb, ssfa, ssfb)
        outs["dual"] = nk.dual_gemm(sa, sb, sb2, ssfa, ssfb, ssfb2)
        outs["gemv"] = nk.gemv(sav, sv, ssfav, ssfv)
        nk.group_gemm([ga.data], [gb.data], [ga.sf], [gb.sf], outs=[gout])

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(2):  # new inputs copied into the captured buffers, then replay
        a2, bb2, b22, av2, vv2, _, _ = _args(gen, dev)
        for dst, src in zip(static, (a2.data, bb2.data, b22.data, a2.sf, bb2.sf, b22.sf, av2.data, vv2.data, av2.sf,
                                     vv2.sf)):
            dst.copy_(src)
        gout.fill_(float("nan"))
        sx.normal_()
        alpha.fill_(alpha.item() * 2)
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(outs["w4a16"], reference.gemm_w4a16(sx, bb2.data, bb2.sf, alpha, bias), "graph replay w4a16")
        assert_matches(outs["epilogue"], reference.dual_gemm(a2.data, bb2.data, b22.data, a2.sf, bb2.sf, b22.sf, alpha,
                                                             3.0, torch.bfloat16), "graph replay dual, alphas, bf16")
        assert_matches(outs["gemm"], ref_gemm(a2, bb2), "graph replay gemm")
        assert_matches(outs["dual"], reference.dual_gemm(a2.data, bb2.data, b22.data, a2.sf, bb2.sf, b22.sf),
                       "graph replay dual_gemm")
        assert_matches(outs["gemv"], ref_gemv(av2, vv2), "graph replay gemv")
        assert_matches(gout, ref_gemm(ga, gb), "graph replay group_gemm")


@needs_cuda
def test_stream_k_in_graph_and_on_two_streams(gen):
    """A shape that runs stream-K on a Hopper GPU (a workspace from the caching
    allocator per call; tests/test_tensor_cores.py asserts the kernel): captured
    in a CUDA graph and replayed on new inputs (every replay keeps the captured
    flag value, so each must leave its flags cleared for the next), and two
    such calls at once on two streams, each with its own workspace."""
    dev = "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    m, n, k = 200, 3 * sms // 8 * 256 - 77, 16384
    for out, ref in gemm_graph_replays(m, n, k, gen, replays=2):
        assert_matches(out, ref, "stream-K gemm, graph replay")
    a, b = gemm_problem(None, m, n, k, gen, dev)
    c, d = gemm_problem(None, m, n, k, gen, dev)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [poisoned((m, n), dev), poisoned((m, n), dev)]
    for st, (x, y), o in zip(streams, ((a, b), (c, d)), outs):
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            nk.gemm(x.data, y.data, x.sf, y.sf, out=o)
    for st in streams:
        torch.cuda.current_stream().wait_stream(st)
    torch.cuda.synchronize()
    assert_matches(outs[0], ref_gemm(a, b), "stream-K gemm on stream 1 of 2")
    assert_matches(outs[1], ref_gemm(c, d), "stream-K gemm on stream 2 of 2")


@needs_cuda
def test_non_default_stream(gen):
    dev = "cuda"
    a, b, b2, a_v, v, ga, gb = _args(gen, dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # a long kernel first on this stream, so a launch on the wrong stream would read unfinished data
        big = torch.randn(4096, 4096, device=dev)
        for _ in range(4):
            big = big @ big
        sa = a.data.view(torch.uint8).clone()
        out = nk.gemm(sa, b.data, a.sf, b.sf)
        out_v = nk.gemv(a_v.data, v.data, a_v.sf, v.sf)
        out_d = nk.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert_matches(out, ref_gemm(a, b), "gemm on a side stream")
    assert_matches(out_v, ref_gemv(a_v, v), "gemv on a side stream")
    assert_matches(out_d, reference.dual_gemm(a.data, b.data, b2.data, a.sf, b.sf, b2.sf), "dual on a side stream")


@needs_cuda
def test_gemv_launches_back_to_back_on_several_streams(gen):
    """GEMV launches of different shapes and batch counts back to back on the
    default stream and two side streams, every output checked (outputs
    poisoned first). Guards any state a launch leaves for the next one on its
    stream, such as run-time work counters would be."""
    dev = "cuda"
    shapes = [(None, 300, 1024), (4, 129, 2048), (70, 5, 512), (8, 1000, 4096), (None, 7168, 2048)]
    problems = [gemv_problem(L, m, k, gen, dev) for L, m, k in shapes]
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    for s in streams[1:]:
        s.wait_stream(streams[0])
    runs = []
    for rep in range(3):
        for i, (a, b) in enumerate(problems):
            s = streams[(rep + i) % len(streams)]
            with torch.cuda.stream(s):
                out = poisoned((*([shapes[i][0]] if shapes[i][0] else []), shapes[i][1]), dev)
                nk.gemv(a.data, b.data, a.sf, b.sf, out=out)
            runs.append((i, rep, out))
    torch.cuda.synchronize()
    for i, rep, out in runs:
        a, b = problems[i]
        assert_matches(out, ref_gemv(a, b), f"gemv {shapes[i]} launch {rep}")


@needs_cuda
@pytest.mark.parametrize("first,second", [("gemv", "gemv"), ("gemm", "gemv"), ("gemv", "gemm"), ("gemm", "gemm")])
def test_launch_reads_what_the_launch_before_wrote(gen, first, second):
    """The large fp4 operand of each reader launch is the bytes of the output the
    launch just before it wrote (writer, reader, writer, ... back to back). The
    kernels launch programmatically: a reader's CTAs may start while the writer
    still runs, and must not read their operand before they wait for it (the
    L2 prefetches of the operand would have touched it there).
    No stale byte may reach a result: every writer's and reader's output is
    checked against the reference of what was really there."""
    dev = "cuda"
    k = 4096
    # writer outputs of 128 KB (gemv, 8 x 8192 rows) or 2 MB (gemm 256 x 4096)
    rows = {"gemv": 64, "gemm": 1024}[first]  # the reader's matrix: rows x k codes = the writer's bytes

    def writer():
        if first == "gemv":
            a, b = gemv_problem(8, 8192, k, gen, dev)
            return (a, b), poisoned((8, 8192), dev)
        a, b = gemm_problem(None, 256, 4096, k, gen, dev)
        return (a, b), poisoned((256, 4096), dev)

    runs = []
    for rep in range(4):
        (wa, wb), wout = writer()
        if second == "gemv":
            mat, v = gemv_problem(None, rows, k, gen, dev)
            rout = poisoned((rows,), dev)
        else:
            v, mat = gemm_problem(None, 128, rows, k, gen, dev)  # mat: the weights (n = rows)
            rout = poisoned((128, rows), dev)
        torch.cuda.synchronize()  # inputs ready; from here on only the two launches
        getattr(nk, first)(wa.data, wb.data, wa.sf, wb.sf, out=wout)
        mat_bytes = wout.view(torch.uint8).view(rows, k // 2)
        if second == "gemv":
            nk.gemv(mat_bytes, v.data, mat.sf, v.sf, out=rout)
        else:
            nk.gemm(v.data, mat_bytes, v.sf, mat.sf, out=rout)
        runs.append((wa, wb, wout, mat, v, rout))
    torch.cuda.synchronize()
    for rep, (wa, wb, wout, mat, v, rout) in enumerate(runs):
        wref = ref_gemv(wa, wb) if first == "gemv" else ref_gemm(wa, wb)
        assert_matches(wout, wref, f"writer {first} {rep}")
        mat_bytes = wout.view(torch.uint8).view(rows, k // 2)
        if second == "gemv":
            ref = reference.gemv(mat_bytes, v.data, mat.sf, v.sf)
        else:
            ref = reference.gemm(v.data, mat_bytes, v.sf, mat.sf)
        assert_matches(rout, ref, f"reader {second} of {first}'s output, {rep}")
