"""Tensor parallelism of NVFP4Linear: shard() alone, and the column- / row-parallel layers in two
processes on the gloo backend (CPU), each compared with the unsharded layer.

Column-parallel shards compute each output element exactly as the whole layer does: equal bit for
bit (on the CPU kernels; on a GPU the kernel chosen can depend on N). Row-parallel shards each sum
their part of K and round it to the output dtype before the all-reduce adds the parts: that is a
different summation order and more roundings, so the result is compared to within one unit in the
last place of the sum of the parts' magnitudes.

Run as a script, this file is one rank of the two-process job (see _run_workers).
"""

import os
import socket
import subprocess
import sys

import pytest
import torch

from nvfp4_kernels import nn
from helpers import random_layer

MODES = ("w4a4", "w4a16")
DTYPES = (torch.bfloat16, torch.float16)
WORLD = 2
N, K, HIDDEN = 24, 96, 64  # the pair: K -> HIDDEN (column) -> N (row)


def assert_row_parallel_close(got, want, parts, what):
    """|got - want| <= one ulp of sum(|parts|) + |want|: the all-reduce adds parts rounded to the
    output dtype (each off by half an ulp of itself), then rounds the sum."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    eps = torch.finfo(want.dtype).eps
    bound = eps * (sum(p.double().abs() for p in parts) + want.double().abs()) + torch.finfo(want.dtype).tiny
    diff = (got.double() - want.double()).abs()
    assert bool((diff <= bound).all()), f"{what}: max |diff| {diff.max().item():.3g}, bound there " \
                                        f"{bound.flatten()[diff.argmax()].item():.3g}"


# ---- shard() in one process -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_shard_pieces_make_the_layer(gen, mode):
    layer = random_layer(N, K, True, mode, gen)
    x = torch.randn(3, 5, K, generator=gen).to(torch.bfloat16)
    want = layer(x)
    cols = [nn.shard(layer, r, 3, dim=0) for r in range(3)]
    assert [c.weight.shape for c in cols] == [(N // 3, K // 2)] * 3
    assert torch.equal(torch.cat([c(x) for c in cols], dim=-1), want)
    rows = [nn.shard(layer, r, 3, dim=1) for r in range(3)]
    assert [(r.weight.shape, r.weight_scale.shape) for r in rows] == [((N, K // 6), (N, K // 48))] * 3
    assert rows[0].bias is not None and rows[1].bias is None and rows[2].bias is None
    parts = [r(x[..., i * K // 3:(i + 1) * K // 3]) for i, r in enumerate(rows)]
    total = (parts[0].float() + parts[1].float() + parts[2].float()).to(torch.bfloat16)
    assert_row_parallel_close(total, want, parts, f"row shards {mode}")
    for s in cols + rows:  # the per-tensor scalars are replicated
        assert torch.equal(s.weight_scale_2, layer.weight_scale_2)
        if mode == "w4a4":
            assert torch.equal(s._alpha, layer._alpha)


def test_bad_shards(gen):
    layer = random_layer(N, K, True, "w4a4", gen)
    with pytest.raises(ValueError, match="does not split evenly"):
        nn.shard(layer, 0, 5, dim=0)
    with pytest.raises(ValueError, match="whole 16-value blocks"):
        nn.shard(layer, 0, 4, dim=1)  # K/4 = 24
    with pytest.raises(ValueError, match="dim must be 0"):
        nn.shard(layer, 0, 2, dim=2)
    with pytest.raises(ValueError, match="rank"):
        nn.shard(layer, 2, 2, dim=0)
    with pytest.raises(TypeError, match="NVFP4Linear"):
        nn.shard(torch.nn.Linear(K, N), 0, 2, dim=0)
    with pytest.raises(ValueError, match="whole 16-value blocks"):
        nn.RowParallelNVFP4Linear(48, 8, rank=0, world_size=2)


# ---- two processes -------------------------------------------------------------------------------


def _cases(gen):
    """Per mode and dtype: a column layer K -> HIDDEN, a row layer HIDDEN -> N, and inputs."""
    cases = {}
    for mode in MODES:
        col, row = random_layer(HIDDEN, K, True, mode, gen), random_layer(N, HIDDEN, True, mode, gen)
        for dtype in DTYPES:
            cases[mode, dtype] = {"col": col.state_dict(), "row": row.state_dict(),
                                  "x": torch.randn(4, 3, K, generator=gen).to(dtype),
                                  "h": torch.randn(4, 3, HIDDEN, generator=gen).to(dtype)}
    return cases


def _load(sd, n, k, mode):
    layer = nn.NVFP4Linear(k, n, mode=mode)
    layer.load_state_dict(sd)
    return layer


def _worker(rank, world, port, folder):
    """One rank: every case through the parallel layers; the outputs saved for the test to check."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    cases = torch.load(os.path.join(folder, "cases.pt"))
    out = {}
    for (mode, dtype), c in cases.items():
        col, row = _load(c["col"], HIDDEN, K, mode), _load(c["row"], N, HIDDEN, mode)
        pcol = nn.ColumnParallelNVFP4Linear.from_layer(col)
        prow = nn.RowParallelNVFP4Linear.from_layer(row)
        out[mode, dtype, "column"] = pcol(c["x"])
        out[mode, dtype, "row"] = prow(c["h"])
        # the Megatron pair: column without the gather feeds row with this rank's slice
        pcol.gather_output, prow.input_is_parallel = False, True
        out[mode, dtype, "pair"] = prow(pcol(c["x"]))
    torch.save(out, os.path.join(folder, f"out{rank}.pt"))
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_workers(folder, timeout=120):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]))
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), str(r), str(WORLD), str(port), folder],
                              cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"the {WORLD} ranks did not finish in {timeout} s")
    for r, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {r} failed (exit {p.returncode}):\n{log[-4000:]}"


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    """The cases, the ranks' outputs (one two-process run for the module), and the seed used."""
    import conftest

    gen = torch.Generator().manual_seed(conftest.SEED)
    folder = str(tmp_path_factory.mktemp("tp"))
    cases = _cases(gen)
    torch.save(cases, os.path.join(folder, "cases.pt"))
    _run_workers(folder)
    outs = [torch.load(os.path.join(folder, f"out{r}.pt")) for r in range(WORLD)]
    return cases, outs


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("style", ("column", "row", "pair"))
@pytest.mark.parametrize("mode", MODES)
def test_parallel_equals_unsharded(distributed, mode, style, dtype):
    cases, outs = distributed
    c = cases[mode, dtype]
    col, row = _load(c["col"], HIDDEN, K, mode), _load(c["row"], N, HIDDEN, mode)
    got = outs[0][mode, dtype, style]
    assert torch.equal(outs[1][mode, dtype, style], got), "the ranks' results differ"
    if style == "column":
        assert torch.equal(got, col(c["x"])), "column-parallel must equal the unsharded layer bit for bit"
        return
    h = c["h"] if style == "row" else col(c["x"])
    pieces = [nn.shard(row, r, WORLD, dim=1) for r in range(WORLD)]
    parts = [p(h[..., r * HIDDEN // WORLD:(r + 1) * HIDDEN // WORLD]) for r, p in enumerate(pieces)]
    assert_row_parallel_close(got, row(h), parts, f"{style} {mode} {dtype}")


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
