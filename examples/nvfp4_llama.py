"""A Llama-architecture model in NVFP4: quantize, save as a ModelOpt checkpoint, load it back, generate.

    python examples/nvfp4_llama.py --tiny         # CI size: seconds on a CPU
    python examples/nvfp4_llama.py                # a larger one (hidden 512, 4 layers)
    python examples/nvfp4_llama.py --config 8b    # Llama-3-8B's shapes, for a GPU

The model is built from a config with random weights (nothing is downloaded). It is quantized
as NVIDIA ModelOpt quantizes (input scales calibrated on random tokens), written as a ModelOpt
checkpoint, and loaded back twice with nvfp4_kernels.models.hf.from_pretrained: W4A4 (weights
and activations NVFP4) and W4A16 (weights only). Each generates greedily; printed per mode:

* the logits' max error against a fake-quantized reference, as max|diff| / max|logit| over the
  prompt and the generated tokens: the same model in the same dtype with each NVFP4 layer
  replaced by its fake-quantized twin (the weights, and for W4A4 the activations, quantized and
  dequantized with nvfp4_kernels.reference, the product computed exactly in float64 and rounded
  once to the model's dtype). The two differ only by the kernels' fp32 summation order, and by
  what a one-unit difference flips downstream (in W4A4 an activation on an e2m1 rounding
  boundary moves by a whole 4-bit step, so through many layers of random weights the two drift
  apart); next to it, the same measure for an fp32-summing twin (the exact operands summed by
  torch's float32 matmul): how far fp32 accumulation as such lands through this model; and the
  largest error of one layer on its own input, as a fraction of the layer's max|out| and in units
  in the last place of the model's dtype at that max: a kernel that sums the exact products in
  fp32 and rounds once is within one unit (for bf16 that unit is up to 2^-7 of max|out|, for
  fp16 2^-10);
* the top-1 agreement with the bf16 model over the generated tokens (both read the same
  sequence): what 4-bit quantization changes;
* on a GPU, decode tokens/s at batch 1 for bf16, W4A4 and W4A16: one token's forward pass,
  captured in a CUDA graph (a decode step's weight traffic, with no KV cache: attention over a
  short context costs little beside the weights), median of replays.

Random weights give flat logits, so the agreement is lower than a trained model's.
"""

import argparse
import copy
import os
import sys
import tempfile
import time

import torch

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.models import hf, quantize_model, save_modelopt
from nvfp4_kernels.nn import NVFP4Linear

CONFIGS = {
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=8192),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5),
}


class FakeQuantLinear(torch.nn.Module):
    """An NVFP4Linear's exact twin: its weights dequantized (float64); for W4A4 the input quantized
    and dequantized per 16 values with the layer's global scale; the product and bias in float64,
    rounded once to the input's dtype. The float64 weights are made per call, so that an 8B-sized
    model's reference holds one layer's at a time. With fp32=True, the same exact operands summed
    by torch's float32 matmul (an fp32 accumulation in another order than the kernels'), alpha and
    bias applied in float32 after the sum, as the kernels do: how far any fp32-summing kernel lands
    from the exact twin through this model."""

    def __init__(self, layer: NVFP4Linear, fp32: bool = False):
        super().__init__()
        self.layer = layer  # its buffers, read in forward
        self.w4a4 = layer.mode == "w4a4"
        self.fp32 = fp32

    def forward(self, x):
        layer = self.layer
        if self.fp32:
            w = reference.dequantize(layer.weight_codes(), layer.weight_scales(), torch.float32)  # exact in float32
            xd, alpha = x.float(), layer.weight_scale_2.float()
            if self.w4a4:
                codes, sf = reference.quantize(x.float(), layer._input_global_scale)
                xd, alpha = reference.dequantize(codes, sf, torch.float32), layer._alpha
            y = torch.nn.functional.linear(xd, w) * alpha
            return (y if layer.bias is None else y + layer.bias.float()).to(x.dtype)
        w = reference.dequantize(layer.weight_codes(), layer.weight_scales()) * layer.weight_scale_2.double()
        xd = x.double()
        if self.w4a4:
            codes, sf = reference.quantize(x.float(), layer._input_global_scale)  # 1 / input_scale, as the layer
            xd = reference.dequantize(codes, sf) * layer.input_scale.double()
        bias = None if layer.bias is None else layer.bias.double()
        return torch.nn.functional.linear(xd, w, bias).to(x.dtype)


def fake_quant_reference(model, model_q, fp32=False):
    """model (same dtype) with each of model_q's NVFP4 layers as a FakeQuantLinear."""
    ref = copy.deepcopy(model)
    for name, mod in model_q.named_modules():
        if isinstance(mod, NVFP4Linear):
            parent, _, leaf = name.rpartition(".")
            setattr(ref.get_submodule(parent) if parent else ref, leaf, FakeQuantLinear(mod, fp32))
    return ref


@torch.no_grad()
def logits(model, ids):
    return model(ids).logits[0].float()


def ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of dtype's values (bf16 / fp16) at |ref| (a float64 tensor), subnormals included."""
    info = torch.finfo(dtype)
    bits = 7 if dtype == torch.bfloat16 else 10  # stored mantissa bits
    e = torch.floor(torch.log2(ref.abs().clamp_min(info.tiny)))
    return torch.exp2(e - bits)


@torch.no_grad()
def logits_and_layer_error(model, ids):
    """The model's logits, and the largest error of one NVFP4 layer against its FakeQuantLinear on
    the same input over the layers, as max|diff| / max|ref| and as max|diff| in units in the last
    place of the output's dtype at max|ref|: what the kernels add (a value rounded to the other
    neighbour is off by one unit of its own, at most one of the largest)."""
    worst, handles = [0.0, 0.0], []

    def hook(layer, args, out):
        ref = FakeQuantLinear(layer)(args[0])
        o, r = out.double(), ref.double()
        worst[0] = max(worst[0], ((o - r).abs().max() / r.abs().max()).item())
        worst[1] = max(worst[1], ((o - r).abs().max() / ulp(r.abs().max(), out.dtype)).item())

    for mod in model.modules():
        if isinstance(mod, NVFP4Linear):
            handles.append(mod.register_forward_hook(hook))
    try:
        return logits(model, ids), worst
    finally:
        for h in handles:
            h.remove()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def tokens_per_second(model, device, replays=50):
    """1 / the GPU time of one token's forward pass (batch 1, no KV cache) replayed from a CUDA
    graph, median of `replays`. Returns (tokens/s, how it was timed): eagerly, host overhead
    included, where capture fails."""
    ids = torch.zeros(1, 1, dtype=torch.long, device=device)
    step = lambda: model(ids, use_cache=False).logits  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graphs asks
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run, how = graph.replay, "CUDA graph"
    except Exception as e:  # a model whose forward cannot be captured: time it eagerly, and say so
        print(f"CUDA graph capture failed ({type(e).__name__}: {str(e).splitlines()[0][:120]}); eager")
        run, how = step, "eager"
    times = []
    for i in range(replays + 5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end) / 1e3)
    return 1.0 / sorted(times)[len(times) // 2], how


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true", help="the CI-sized model (same as --config tiny)")
    p.add_argument("--config", choices=sorted(CONFIGS), default="small")
    p.add_argument("--tokens", type=int, default=32, help="tokens to generate")
    p.add_argument("--out", help="checkpoint directory (default: a temporary one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16", help="the model's dtype")
    args = p.parse_args()
    name = "tiny" if args.tiny else args.config
    dtype = getattr(torch, args.dtype)

    from transformers import AutoModelForCausalLM, LlamaConfig

    device = "cuda" if torch.cuda.is_available() and nk.WITH_CUDA else "cpu"
    torch.set_float32_matmul_precision("highest")  # the fp32-summing twin's matmul in fp32, not TF32
    torch.manual_seed(args.seed)
    cfg = LlamaConfig(**CONFIGS[name], max_position_embeddings=4096, architectures=["LlamaForCausalLM"])
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    n_params = sum(t.numel() for t in model.parameters())
    gpu = f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""
    print(f"device: {device}{gpu}; model: Llama-architecture '{name}', hidden {cfg.hidden_size}, "
          f"{cfg.num_hidden_layers} layers, vocab {cfg.vocab_size}, {n_params / 1e6:.1f}M parameters, random weights")

    prompt = torch.randint(0, cfg.vocab_size, (1, 8), device=device)
    calibration = [torch.randint(0, cfg.vocab_size, (1, 64), device=device) for _ in range(4)]
    quantized = copy.deepcopy(model)
    t = time.perf_counter()
    quantize_model(quantized, mode="w4a4", calibration=calibration)
    tmp = None if args.out else tempfile.TemporaryDirectory()
    out = args.out or tmp.name
    save_modelopt(quantized, out)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    n_layers = sum(isinstance(m, NVFP4Linear) for m in quantized.modules())
    del quantized
    print(f"quantized {n_layers} linear layers (lm_head kept in {args.dtype}) and saved a ModelOpt checkpoint of "
          f"{size / 2**20:.1f} MiB in {time.perf_counter() - t:.1f} s")

    speeds = {}
    for mode in ("w4a4", "w4a16"):
        m = hf.from_pretrained(out, mode=mode, device=device, dtype=dtype)
        seq = m.generate(prompt, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False,
                         pad_token_id=0)
        got, (layer_err, layer_ulp) = logits_and_layer_error(m, seq)
        ref = logits(fake_quant_reference(model, m), seq)
        floor = logits(fake_quant_reference(model, m, fp32=True), seq)
        plain = logits(model, seq)
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        err_fp32 = ((floor - ref).abs().max() / ref.abs().max()).item()
        gen = slice(prompt.shape[1] - 1, seq.shape[1] - 1)  # the positions that chose the generated tokens
        agree = (plain[gen].argmax(-1) == seq[0, prompt.shape[1]:]).float().mean().item()
        print(f"{mode}: logits vs the fake-quantized reference: max error {err:.2e} of max|logit| (an fp32-summing "
              f"twin: {err_fp32:.2e}; one layer on its own input: {layer_err:.2e} of max|out|, {layer_ulp:.2f} ulp); "
              f"top-1 agreement with the {args.dtype} model {agree:.3f} over {args.tokens} generated tokens")
        if device == "cuda":
            speeds[mode] = m
        else:
            del m
    if device == "cuda":
        rates = {k: tokens_per_second(m, device) for k, m in {args.dtype: model, **speeds}.items()}
        hows = sorted({how for _, how in rates.values()})
        print(f"decode tokens/s at batch 1 (one token's forward, {' / '.join(hows)}): "
              + ", ".join(f"{k} {v:.1f}" for k, (v, _) in rates.items())
              + "; speedup over " + args.dtype + ": "
              + ", ".join(f"{k} {v / rates[args.dtype][0]:.2f}x" for k, (v, _) in rates.items() if k in speeds))
    else:
        print("decode tokens/s: measured on a GPU only")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
