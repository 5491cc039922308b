"""Shared fixtures: fresh random inputs per run, the devices to test, and the check.

Every run draws new inputs (the seed is printed in the header; `pytest --seed N`
replays one). Each test derives its own generator from the seed and its node
id, so a failure can be replayed alone.
"""

import hashlib
import os

import pytest
import torch

import nvfp4_kernels

SEED = int.from_bytes(os.urandom(4), "little")
HAS_CUDA = nvfp4_kernels.WITH_CUDA and torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and a CUDA build of nvfp4_kernels")


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None, help="the seed of a run to replay (printed in its header)")


def pytest_configure(config):
    global SEED
    # pytest-xdist runs one process per worker: each takes its share of the cores for the CPU
    # kernels and references, not all of them (16 workers x 16 threads starve each other)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    if config.getoption("--seed") is not None:
        SEED = config.getoption("--seed")


def pytest_report_header(config):
    gpu = torch.cuda.get_device_name() if HAS_CUDA else "none"
    return f"nvfp4: seed {SEED} (--seed to replay), CUDA kernels built: {nvfp4_kernels.WITH_CUDA}, GPU: {gpu}"


@pytest.fixture
def gen(request):
    digest = hashlib.sha256(f"{SEED}:{request.node.nodeid}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def assert_matches(out, ref, what, *, atol=1e-3, rtol=None, slack=None):
    """|out - ref| <= atol + rtol |ref| (+ slack, a tensor like ref: a bound on the
    error an fp32 sum may make, where its terms are not exact in fp32) elementwise,
    NaN exactly where ref is NaN (outputs are poisoned with NaN before a call, so
    unwritten elements fail). out has ref's dtype (fp16 or bf16); rtol defaults to
    about one unit in the last place of it (a kernel's fp32 sum may round to the
    other neighbour)."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype}, want {ref.dtype}"
    if rtol is None:
        rtol = 8e-3 if ref.dtype == torch.bfloat16 else 1e-3
    o, r = out.detach().cpu().double(), ref.detach().cpu().double()
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    assert torch.equal(nan_o, nan_r), (
        f"{what}: NaN mismatch: {int((nan_o & ~nan_r).sum())} unexpected NaN (unwritten?), "
        f"{int((nan_r & ~nan_o).sum())} missing NaN, seed {SEED}"
    )
    allowed = atol + rtol * r.abs() + (0 if slack is None else slack.detach().cpu().double())
    ok = nan_r | (o == r) | ((o - r).abs() <= allowed)
    if not bool(ok.all()):
        bad = (~ok).nonzero()
        idx = tuple(bad[0].tolist())
        raise AssertionError(
            f"{what}: {bad.shape[0]} of {ok.numel()} elements off; first at {idx}: got {o[idx].item()}, "
            f"want {r[idx].item()}; seed {SEED}"
        )
