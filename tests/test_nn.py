"""nvfp4_kernels.nn.NVFP4Linear: both modes against a float64 fake-quantized reference built from the
layer's own buffers, leading dims, dtypes, odd shapes, state_dict round trips (ModelOpt's names, and a
real ModelOpt export where nvidia-modelopt is installed), from_linear, torch.compile, CUDA graphs, bad
inputs."""

import io
import itertools

import pytest
import torch

from nvfp4_kernels import reference
from nvfp4_kernels.nn import NVFP4Linear
from conftest import assert_matches, needs_cuda
from helpers import random_layer

MODES = ("w4a4", "w4a16")
DTYPES = (torch.bfloat16, torch.float16)
AMAX_TO_SCALE = 6.0 * 448.0


def activations(shape, dtype, gen, device):
    """Normal activations: fp32 sums of their products stay well within an output ulp of the exact ones."""
    return torch.randn(shape, generator=gen).to(dtype).to(device)


def fake_quantized(layer, x):
    """The layer's numbers in float64 from its buffers: x_q @ W^T + bias, rounded to x's dtype."""
    w = reference.dequantize(layer.weight_codes(), layer.weight_scales()) * layer.weight_scale_2.double()
    x2 = x.reshape(-1, layer.in_features)
    if layer.mode == "w4a4":
        codes, sf = reference.quantize(x2, global_scale=1.0 / layer.input_scale)
        xq = reference.dequantize(codes, sf) * layer.input_scale.double()
    else:
        xq = x2.double()
    y = xq @ w.T
    if layer.bias is not None:
        y = y + layer.bias.double()
    return y.to(x.dtype).reshape(*x.shape[:-1], layer.out_features)


@pytest.mark.parametrize("n,k", list(itertools.product((1, 7, 129), (16, 48, 1040))))
@pytest.mark.parametrize("mode", MODES)
def test_forward_matches_reference(device, gen, mode, n, k):
    for bias, dtype in ((True, torch.bfloat16), (False, torch.float16), (True, torch.float16)):
        layer = random_layer(n, k, bias, mode, gen, device, dtype=dtype)
        for lead in ((), (5,), (2, 3), (0,)):
            for x_dtype in DTYPES:
                x = activations((*lead, k), x_dtype, gen, device)
                y = layer(x)
                assert y.shape == (*lead, n) and y.dtype == x_dtype
                assert_matches(y, fake_quantized(layer, x), f"{mode} {n}x{k} x {list(x.shape)} {x_dtype} "
                                                            f"bias {bias and dtype}")


@pytest.mark.parametrize("mode", MODES)
def test_strided_input(device, gen, mode):
    """x as F.linear takes it: a transposed or sliced view is read like its contiguous copy."""
    layer = random_layer(9, 64, True, mode, gen, device)
    xt = activations((64, 6), torch.bfloat16, gen, device).t()  # K not contiguous
    assert torch.equal(layer(xt), layer(xt.contiguous()))
    wide = activations((3, 4, 96), torch.float16, gen, device)[..., 16:80]  # rows 96 apart
    assert torch.equal(layer(wide), layer(wide.contiguous()))


CHECKPOINT = {  # name: (dtype, shape) as ModelOpt's export writes a linear layer, N=24, K=64
    "weight": (torch.uint8, (24, 32)),
    "weight_scale": (torch.float8_e4m3fn, (24, 4)),
    "weight_scale_2": (torch.float32, ()),
    "input_scale": (torch.float32, ()),
    "bias": (torch.bfloat16, (24,)),
}


@pytest.mark.parametrize("mode", MODES)
def test_state_dict_round_trip(device, gen, mode):
    layer = random_layer(24, 64, True, mode, gen, device)
    sd = layer.state_dict()
    want = {k: v for k, v in CHECKPOINT.items() if mode == "w4a4" or k != "input_scale"}
    assert {k: (v.dtype, tuple(v.shape)) for k, v in sd.items()} == want
    x = activations((3, 64), torch.bfloat16, gen, device)
    y = layer(x)

    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    fresh = NVFP4Linear(64, 24, mode=mode, device=device)
    fresh.load_state_dict(torch.load(buf))
    assert torch.equal(fresh(x), y), "a layer loaded from the state_dict must compute the same bits"

    # the scalars stored as [1] (some exporters do) load too
    one = {k: (v.reshape(1) if v.dim() == 0 else v) for k, v in sd.items()}
    fresh = NVFP4Linear(64, 24, mode=mode, device=device)
    fresh.load_state_dict(one)
    assert fresh.weight_scale_2.shape == () and torch.equal(fresh(x), y)

    # load_state_dict(assign=True) into a layer made on the meta device
    with torch.device("meta"):
        lazy = NVFP4Linear(64, 24, mode=mode)
    lazy.load_state_dict({k: v.clone() for k, v in sd.items()}, assign=True)
    assert torch.equal(lazy(x), y)

    with pytest.raises(RuntimeError, match="weight_scale_2"):
        NVFP4Linear(64, 24, mode=mode, device=device).load_state_dict({k: v for k, v in sd.items()
                                                                      if k != "weight_scale_2"})


def test_w4a16_layer_loads_a_w4a4_checkpoint(gen):
    """An NVFP4 (w4a4) checkpoint runs in w4a16 too: its input_scale is not needed there."""
    w4a4 = random_layer(24, 64, True, "w4a4", gen, "cpu")
    w4a16 = NVFP4Linear(64, 24, mode="w4a16")
    w4a16.load_state_dict(w4a4.state_dict())
    x = activations((3, 64), torch.bfloat16, gen, "cpu")
    assert_matches(w4a16(x), fake_quantized(w4a16, x), "w4a16 from a w4a4 checkpoint")


def test_scales_keep_their_dtype_under_module_casts(gen):
    """model.to(dtype) / .half() cast floating tensors; the scales must stay e4m3 / float32."""
    layer = random_layer(24, 64, True, "w4a4", gen, "cpu")
    x = activations((3, 64), torch.float16, gen, "cpu")
    y = layer(x)
    layer.half()
    assert layer.bias.dtype == torch.float16
    assert layer.weight_scale.dtype == torch.float8_e4m3fn and layer.weight.dtype == torch.uint8
    assert layer.weight_scale_2.dtype == layer.input_scale.dtype == layer._alpha.dtype == torch.float32
    assert_matches(layer(x), y, "after .half()")  # only the bias rounding changed (bf16 -> fp16 exact)


def test_derived_scales_follow_a_loaded_input_scale(gen):
    layer = random_layer(24, 64, False, "w4a4", gen, "cpu")
    sd = layer.state_dict()
    sd["input_scale"] = sd["input_scale"] * 2
    alpha = layer._alpha
    layer.load_state_dict(sd)
    assert layer._alpha is alpha, "derived scalars are updated in place (a captured graph keeps reading them)"
    assert layer._alpha == layer.input_scale * layer.weight_scale_2
    assert layer._input_global_scale == 1.0 / layer.input_scale
    x = activations((3, 64), torch.bfloat16, gen, "cpu")
    assert_matches(layer(x), fake_quantized(layer, x), "after loading a new input_scale")


def test_loads_a_modelopt_export(device, gen):
    """A linear layer quantized by ModelOpt (NVFP4_DEFAULT_CFG, max calibration) and exported as its HF
    export does: the state_dict loads as is and equals from_linear's byte for byte. On a GPU also:
    the layer computes what ModelOpt's own fake-quantized layer computes (its fake quantization runs
    on CUDA only), up to that layer's bf16 matmul."""
    mtq = pytest.importorskip("modelopt.torch.quantization", reason="needs nvidia-modelopt")
    from modelopt.torch.export.quant_utils import postprocess_state_dict
    from modelopt.torch.export.unified_export_hf import _export_quantized_weight

    lin = torch.nn.Linear(64, 24, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(24, 64, generator=gen) * 0.05)
        lin.bias.copy_(torch.randn(24, generator=gen))
    x = activations((16, 64), torch.bfloat16, gen, device)
    ours = NVFP4Linear.from_linear(lin, mode="w4a4", calibration=x)

    model = torch.nn.Sequential(lin)
    mtq.quantize(model, mtq.NVFP4_DEFAULT_CFG, lambda m: m(x))
    if device == "cuda":
        with torch.no_grad():
            fake = model(x)
    _export_quantized_weight(model[0], torch.bfloat16)
    sd = {k.removeprefix("0."): v for k, v in postprocess_state_dict(model.state_dict(), 1.0, None).items()}
    assert {k: (v.dtype, tuple(v.shape)) for k, v in sd.items()} == CHECKPOINT

    layer = NVFP4Linear(64, 24, mode="w4a4", device=device)
    layer.load_state_dict(sd)
    as_bytes = (lambda t: t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t)
    for name, theirs in sd.items():
        assert torch.equal(as_bytes(getattr(ours, name)), as_bytes(theirs)), f"from_linear's {name} != ModelOpt's"
    y = layer(x)
    assert torch.equal(y, ours(x))
    if device == "cuda":
        err = ((y.double() - fake.double()).norm() / fake.double().norm()).item()
        assert err < 1e-2, f"relative difference from ModelOpt's fake-quantized layer {err:.3g}"


@pytest.mark.parametrize("mode", MODES)
def test_from_linear(device, gen, mode):
    """4-bit weights (and activations) on normal data: a relative Frobenius error from the float
    layer of 0.089..0.100 (w4a16) and 0.126..0.141 (w4a4) over 200 draws of rows x N x K = 32 x 64 x
    256. The bands leave room for the draw and keep the modes apart (w4a4 without its activation
    quantization would land in w4a16's)."""
    conventions = pytest.importorskip("nvfp4_kernels.conventions", reason="from_linear needs nvfp4_kernels.conventions")
    lin = torch.nn.Linear(256, 64, dtype=torch.float16, device=device)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(64, 256, generator=gen) * 0.05)
        lin.bias.copy_(torch.randn(64, generator=gen) * 0.1)
    x = activations((32, 256), torch.float16, gen, device)
    kw = {"calibration": x} if mode == "w4a4" else {}
    layer = NVFP4Linear.from_linear(lin, mode=mode, **kw)
    assert layer.bias.dtype == torch.float16 and layer.weight.device.type == torch.device(device).type
    assert layer.weight_scale_2 == conventions.global_scale(lin.weight.detach(), "modelopt")
    if mode == "w4a4":
        assert layer.input_scale == x.abs().amax().float() / AMAX_TO_SCALE
    assert_matches(layer(x), fake_quantized(layer, x), f"from_linear {mode}")

    want = torch.nn.functional.linear(x.double(), lin.weight.double(), lin.bias.double())
    err = ((layer(x).double() - want).norm() / want.norm()).item()
    lo, hi = (0.07, 0.115) if mode == "w4a16" else (0.115, 0.17)
    assert lo < err < hi, f"{mode}: relative error {err:.3f} outside ({lo}, {hi})"

    if mode == "w4a4":  # input_scale given directly, as a number or a tensor: the same layer
        s = float(layer.input_scale)
        for given in (s, torch.tensor([s]), torch.tensor(s, device=device)):
            other = NVFP4Linear.from_linear(lin, input_scale=given)
            assert torch.equal(other.input_scale, layer.input_scale) and torch.equal(other(x), layer(x))
        with pytest.raises(ValueError, match="input_scale"):
            NVFP4Linear.from_linear(lin)  # w4a4 has no activation scale without one
        with pytest.raises(ValueError, match="exactly one"):
            NVFP4Linear.from_linear(lin, input_scale=s, calibration=x)
        with pytest.raises(ValueError, match="positive"):
            NVFP4Linear.from_linear(lin, calibration=torch.zeros_like(x))
    else:
        with pytest.raises(ValueError, match="w4a4"):
            NVFP4Linear.from_linear(lin, mode="w4a16", input_scale=0.01)


def test_from_linear_float32_without_bias(gen):
    pytest.importorskip("nvfp4_kernels.conventions", reason="from_linear needs nvfp4_kernels.conventions")
    lin = torch.nn.Linear(32, 8, bias=False)
    layer = NVFP4Linear.from_linear(lin, mode="w4a16")
    assert layer.bias is None
    x = activations((2, 32), torch.bfloat16, gen, "cpu")
    assert_matches(layer(x), fake_quantized(layer, x), "from a float32 Linear")


def test_torch_compile_fullgraph(device, gen):
    """Both modes in one compiled function (compiling is slow on a small CPU): the eager bits."""
    l4 = random_layer(17, 96, True, "w4a4", gen, device)
    l16 = random_layer(17, 96, False, "w4a16", gen, device)
    x = activations((2, 5, 96), torch.bfloat16, gen, device)

    def f(x):
        return l4(x), l16(x)

    compiled = torch.compile(f, fullgraph=True)
    for got, want in zip(compiled(x), f(x)):
        assert torch.equal(got, want)


@needs_cuda
@pytest.mark.parametrize("n,m", [(129, 7), (256, 1), (256, 7)])  # 256: the weight laid out by tile
@pytest.mark.parametrize("mode", MODES)
def test_cuda_graph_capture_and_replay(gen, mode, n, m):
    """Captured once; new inputs, and new weights and scales loaded in place, are seen by replays."""
    layer = random_layer(n, 1040, True, mode, gen, "cuda")
    assert (layer.weight.dim() == 4) == (n == 256)
    x = activations((m, 1040), torch.bfloat16, gen, "cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(x)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x)
    for step in range(2):
        x.copy_(activations((m, 1040), torch.bfloat16, gen, "cuda"))
        if step:
            layer.load_state_dict(random_layer(n, 1040, True, mode, gen, "cpu").state_dict())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, layer(x)), f"replay {step} differs from eager"
        assert_matches(y, fake_quantized(layer, x), f"replay {step}")


def test_bad_inputs():
    layer = NVFP4Linear(32, 8)
    with pytest.raises(TypeError, match=r"x must be float16 or bfloat16, got torch.float32; cast"):
        layer(torch.zeros(2, 32))
    with pytest.raises(ValueError, match=r"in_features=32.*\(2, 48\)"):
        layer(torch.zeros(2, 48, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="in_features=32"):
        layer(torch.tensor(1.0, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="mode"):
        NVFP4Linear(32, 8, mode="w8a8")
    with pytest.raises(ValueError, match="mode"):
        NVFP4Linear.from_linear(torch.nn.Linear(32, 8), mode="fp4")
    for k in (0, 8, 40, 32.0):
        with pytest.raises(ValueError, match="in_features must be a positive multiple of 16"):
            NVFP4Linear(k, 8)
    with pytest.raises(ValueError, match="out_features"):
        NVFP4Linear(32, 0)
    with pytest.raises(TypeError, match="dtype"):
        NVFP4Linear(32, 8, dtype=torch.int32)
    assert repr(layer) == "NVFP4Linear(in_features=32, out_features=8, bias=True, mode='w4a4')"
