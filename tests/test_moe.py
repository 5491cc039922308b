"""nn.NVFP4MoE: routing, the experts' rows grouped on the device, two grouped_mm stages, the
weighted combine. Against a per-token loop over the same ops on the checkpoint's bytes (no
permutation, no grouping; a bf16 MoE on a GPU holds its experts repacked): on the CPU bit for bit
(each row's sums are the same C code), on a GPU within the rows' rounding; routing against its
formulas; a CUDA graph replayed with new routings; the layout through state_dict, moves and casts;
bad arguments."""

import copy

import pytest
import torch
import torch.nn.functional as F

import nvfp4_kernels as nk
from nvfp4_kernels import reference
from nvfp4_kernels.nn import NVFP4Linear, NVFP4MoE
from conftest import needs_cuda

E, H, I = 8, 64, 48


def make_moe(mode, routing, gen, device, top_k=2, **kw):
    gate, up = (torch.randn(E, I, H, generator=gen) * 0.1 for _ in range(2))
    down = torch.randn(E, H, I, generator=gen) * 0.1
    scales = (torch.rand(E, generator=gen) * 0.01 + 0.001, torch.rand(E, generator=gen) * 0.01 + 0.001)
    moe = NVFP4MoE.from_experts(gate.bfloat16(), up.bfloat16(), down.bfloat16(), top_k, mode=mode,
                                input_scales=scales if mode == "w4a4" else None, routing=routing, **kw)
    if moe.e_score_correction_bias is not None:
        moe.e_score_correction_bias.copy_(torch.randn(E, generator=gen) * 0.1)
    return moe.to(device)


def per_token(moe, x, logits, topk=None):
    """out[t] = sum_j w[t, j] * expert_{ids[t, j]}(x[t]), one row at a time through the dense ops on the
    checkpoint's bytes; the weights and ids routed from logits, or topk's (a router's)."""
    weights, ids = moe.route(logits) if topk is None else topk
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    i = moe.intermediate_size
    w13_codes, w2_codes = moe.weight_codes("w13_weight"), moe.weight_codes("w2_weight")
    w13_scales, w2_scales = moe.weight_scales("w13_weight"), moe.weight_scales("w2_weight")

    def act(v, e, which):  # w4a4: v quantized with expert e's input_scale, as exact values
        if moe.mode == "w4a16":
            return v
        g = 1.0 / getattr(moe, f"{which}_input_scale")[e]
        codes, sf = nk.quantize(v.float() * g)
        return reference.dequantize(codes, sf).to(v.dtype)

    for t in range(x.shape[0]):
        for j in range(moe.top_k):
            e = int(ids[t, j])
            w13, s13 = w13_codes[e], w13_scales[e]
            h = nk.dual_gemm_w4a16(act(x[t:t + 1], e, "w13"), w13[:i], w13[i:], s13[:i], s13[i:],
                                   alpha1=moe._alpha1[e:e + 1], alpha2=moe._alpha3[e:e + 1])
            y = nk.gemm_w4a16(act(h, e, "w2"), w2_codes[e], w2_scales[e], alpha=moe._alpha2[e:e + 1])
            out[t] += weights[t, j] * y[0].float()
    return out.to(x.dtype)


@pytest.mark.parametrize("mode", ["w4a4", "w4a16"])
@pytest.mark.parametrize("routing,kw", [("softmax", {}), ("softmax", {"norm_topk_prob": False}),
                                        ("sigmoid", {"n_group": 4, "topk_group": 2, "correction_bias": True,
                                                     "routed_scaling_factor": 2.5})])
@pytest.mark.parametrize("t", [1, 5, 33])
def test_moe_matches_per_token(device, gen, mode, routing, kw, t):
    moe = make_moe(mode, routing, gen, device, top_k=3, **kw)
    x = (torch.randn(t, H, generator=gen) * 2).bfloat16().to(device)
    logits = torch.randn(t, E, generator=gen).to(device)
    got, want = moe(x, logits), per_token(moe, x, logits)
    assert got.shape == x.shape and got.dtype == x.dtype
    if device == "cpu":
        assert torch.equal(got, want)
    else:  # the grouped launch sums in another order than one row's: a unit of h may flip a w4a4 code
        err = (got.float() - want.float()).abs().max() / want.float().abs().max()
        assert err < (5e-2 if mode == "w4a4" else 1e-2), float(err)


def test_routing_formulas(gen):
    logits = torch.randn(6, E, generator=gen)
    moe = NVFP4MoE(E, H, I, 3, routing="softmax", norm_topk_prob=True)
    w, ids = moe.route(logits)
    p = logits.softmax(-1)
    assert ids.dtype == torch.int32 and torch.equal(ids.long(), p.topk(3, -1)[1])
    torch.testing.assert_close(w, p.gather(1, ids) / p.gather(1, ids).sum(-1, keepdim=True))
    # DeepSeek-V3: groups ranked by their two best corrected scores; weights from the plain sigmoid
    moe = NVFP4MoE(E, H, I, 2, routing="sigmoid", n_group=4, topk_group=2, correction_bias=True,
                   routed_scaling_factor=2.5)
    moe.e_score_correction_bias.copy_(torch.randn(E, generator=gen))
    w, ids = moe.route(logits)
    s = logits.sigmoid()
    c = s + moe.e_score_correction_bias
    for r in range(logits.shape[0]):
        group_score = [sorted(c[r, 2 * g:2 * g + 2].tolist())[-2:] for g in range(4)]
        best = sorted(range(4), key=lambda g: -sum(group_score[g]))[:2]
        allowed = [e for e in range(E) if e // 2 in best]
        pick = sorted(allowed, key=lambda e: -float(c[r, e]))[:2]
        assert sorted(ids[r].tolist()) == sorted(pick)
        sw = s[r, ids[r]]
        torch.testing.assert_close(w[r], sw / (sw.sum() + 1e-20) * 2.5)


@needs_cuda
def test_graph_replays_new_routings(gen):
    moe = make_moe("w4a4", "softmax", gen, "cuda", top_k=2)
    x = (torch.randn(12, H, generator=gen)).bfloat16().cuda()
    logits = torch.randn(12, E, generator=gen).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        moe(x, logits)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = moe(x, logits)
    for scale in (1.0, 5.0, 0.1):  # new routings (and all rows to few experts at 5.0)
        logits.copy_(torch.randn(12, E, generator=gen).cuda() * scale)
        x.copy_(torch.randn(12, H, generator=gen).bfloat16().cuda())
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, moe(x, logits))


@needs_cuda
@pytest.mark.parametrize("mode", ["w4a4", "w4a16"])
def test_moe_holds_repacked_weights(gen, mode):
    """A bf16 NVFP4MoE on a GPU keeps its experts repacked for bf16 (both modes multiply bf16 values);
    state_dict, loading, moves and casts see the checkpoint's bytes; its outputs are the per-token
    loop's over those bytes; fp16 x turns it back to them once."""
    cpu = make_moe(mode, "softmax", gen, "cpu", top_k=2)
    w13, w2 = cpu.w13_weight.clone(), cpu.w2_weight.clone()
    assert w13.dtype == w2.dtype == torch.uint8 and cpu.dtype == torch.bfloat16  # on the host: the checkpoint's bytes
    moe = NVFP4MoE(E, H, I, 2, mode=mode, device="cuda")
    assert moe.w13_weight.dtype == torch.int32 and moe.w13_weight.shape == (E, 2 * I, H // 8)
    assert moe.w2_weight.dtype == torch.int32 and moe.w2_weight.shape == (E, H, I // 8)
    moe.load_state_dict(cpu.state_dict())
    assert torch.equal(moe.w13_weight.cpu(), nk.pack_bf16_pairs(w13))
    assert torch.equal(moe.w2_weight.cpu(), nk.pack_bf16_pairs(w2))
    assert torch.equal(moe.weight_codes("w13_weight").cpu(), w13) and torch.equal(moe.weight_codes("w2_weight").cpu(), w2)
    sd = moe.state_dict()
    assert sd["w13_weight"].dtype == torch.uint8 and torch.equal(sd["w13_weight"].cpu(), w13)
    assert torch.equal(sd["w2_weight"].cpu(), w2)
    x = (torch.randn(24, H, generator=gen) * 2).bfloat16().cuda()
    logits = torch.randn(24, E, generator=gen).cuda()
    tol = 5e-2 if mode == "w4a4" else 1e-2

    def check(m, xx, what):
        got, want = m(xx, logits), per_token(m, xx, logits)
        err = (got.float() - want.float()).abs().max() / want.float().abs().max()
        assert got.dtype == xx.dtype and err < tol, (what, float(err))
        return got

    y = check(moe, x, "repacked")
    moved = copy.deepcopy(cpu).to("cuda")  # packed on the host before the move
    assert moved.w13_weight.dtype == torch.int32 and torch.equal(moved.w13_weight, moe.w13_weight)
    assert torch.equal(moved(x, logits), y)
    half = copy.deepcopy(moe).half()
    assert half.dtype == torch.float16 and half.w13_weight.dtype == torch.uint8 and torch.equal(half.w13_weight.cpu(), w13)
    assert half.w13_weight_scale_2.dtype == torch.float32
    check(half, x.half(), "cast to fp16")
    half.bfloat16()
    assert half.w2_weight.dtype == torch.int32 and torch.equal(half.w2_weight, moe.w2_weight)
    once = copy.deepcopy(moe)
    check(once, x.half(), "fp16 x on a bf16 MoE")
    assert once.w13_weight.dtype == once.w2_weight.dtype == torch.uint8  # the checkpoint's bytes from then on
    check(once, x, "bf16 x after")
    back = moe.to("cpu")
    assert back.w13_weight.dtype == torch.uint8 and torch.equal(back.w13_weight, w13) and torch.equal(back.w2_weight, w2)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("mode", ["w4a4", "w4a16"])
def test_moe_laid_out_by_tile(gen, device, mode):
    """Where I % 64 == 0 and H % 128 == 0 an MoE on a GPU holds its experts' codes and scales laid out by
    tile (layouts.to_expert_tiles; on the CPU only where asked, as here): its outputs are the checkpoint
    layout's bit for bit; state_dict, loading, weight_codes / weight_scales, moves and casts see the
    checkpoint's tensors."""
    h, i, e = 128, 64, 4
    gate, up = (torch.randn(e, i, h, generator=gen) * 0.1 for _ in range(2))
    down = torch.randn(e, h, i, generator=gen) * 0.1
    scales = (torch.rand(e, generator=gen) * 0.01 + 0.001, torch.rand(e, generator=gen) * 0.01 + 0.001)
    cpu = NVFP4MoE.from_experts(gate.bfloat16(), up.bfloat16(), down.bfloat16(), 2, mode=mode,
                                input_scales=scales if mode == "w4a4" else None)
    assert cpu.w13_weight.dim() == 3  # the host's layout: the checkpoint's
    flat = copy.deepcopy(cpu).to(device)
    flat._relayout(to_tiles=False)
    moe = copy.deepcopy(cpu).to(device)
    if device == "cpu":  # as a GPU holds it (the CPU kernel reads either layout)
        moe._relayout(to_int32=True, to_tiles=True)
    words = moe.w13_weight.dtype == torch.int32
    assert words  # bf16: repacked too
    assert moe.w13_weight.shape == (e, 2 * i // 128, 1, 4096 if words else 16384)
    assert moe.w2_weight.shape == (e, h // 128, 1, 4096 if words else 16384)
    assert moe.w13_weight_scale.shape == (e, 2 * i // 128, 1, 2048)
    assert moe.w2_weight_scale.shape == (e, h // 128, 1, 2048) and moe.w2_weight_scale.dtype == torch.float8_e4m3fn
    for name in ("w13_weight", "w2_weight"):
        assert torch.equal(moe.weight_codes(name).cpu(), cpu.weight_codes(name))
        assert torch.equal(moe.weight_scales(name).cpu().view(torch.uint8), cpu.weight_scales(name).view(torch.uint8))
    x = (torch.randn(24, h, generator=gen) * 2).bfloat16().to(device)
    logits = torch.randn(24, e, generator=gen).to(device)
    y = moe(x, logits)
    assert torch.equal(y, flat(x, logits))
    sd = moe.state_dict()
    assert sd["w13_weight"].shape == (e, 2 * i, h // 2) and sd["w13_weight_scale"].shape == (e, 2 * i, h // 16)
    for k, v in cpu.state_dict().items():
        assert torch.equal(sd[k].cpu().view(torch.uint8), v.view(torch.uint8)) if v.dtype == torch.float8_e4m3fn \
            else torch.equal(sd[k].cpu(), v), k
    fresh = NVFP4MoE(e, h, i, 2, mode=mode, device=device)
    if device == "cpu":
        fresh._relayout(to_tiles=True)
    fresh.load_state_dict(cpu.state_dict())
    assert fresh.w13_weight.dim() == 4 and torch.equal(fresh(x, logits), y)
    if device == "cpu":  # back to the host's layout
        moe._relayout()
        assert moe.w13_weight.dim() == 3 and moe.w13_weight.dtype == torch.uint8
        for k, v in cpu.state_dict().items():
            assert torch.equal(getattr(moe, k).view(torch.uint8), v.view(torch.uint8)) if v.dtype == \
                torch.float8_e4m3fn else torch.equal(getattr(moe, k), v), k
    if device == "cuda":
        half = copy.deepcopy(moe).half()  # fp16: the checkpoint's bytes, still by tile
        assert half.w13_weight.dtype == torch.uint8 and half.w13_weight.dim() == 4
        flat_half = copy.deepcopy(flat).half()
        flat_half._relayout(to_tiles=False)
        assert flat_half.w13_weight.dim() == 3
        assert torch.equal(half(x.half(), logits), flat_half(x.half(), logits))
        back = moe.to("cpu")
        assert back.w13_weight.dim() == 3 and torch.equal(back.w13_weight, cpu.w13_weight)
        assert torch.equal(back.w2_weight_scale.view(torch.uint8), cpu.w2_weight_scale.view(torch.uint8))


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"top_k=9 must be at most num_experts=8 and 32"):
        NVFP4MoE(E, H, I, 9)
    with pytest.raises(ValueError, match=r"multiples of 16"):
        NVFP4MoE(E, 40, I, 2)
    with pytest.raises(ValueError, match=r"routing must be one of"):
        NVFP4MoE(E, H, I, 2, routing="relu")
    with pytest.raises(ValueError, match=r"groups go with sigmoid routing"):
        NVFP4MoE(E, H, I, 2, n_group=2)
    with pytest.raises(TypeError, match=r"dtype must be float32, float16 or bfloat16, got torch.int8"):
        NVFP4MoE(E, H, I, 2, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"weight_codes: name must be one of"):
        NVFP4MoE(E, H, I, 2).weight_codes("w13")
    moe = NVFP4MoE(E, H, I, 2, mode="w4a16")
    with pytest.raises(TypeError, match=r"x must be a float16 or bfloat16 \[T, hidden_size=64\]"):
        moe(torch.zeros(3, H), torch.zeros(3, E))
    with pytest.raises(ValueError, match=r"router_logits must be \[T=3, num_experts=8\]"):
        moe(torch.zeros(3, H, dtype=torch.bfloat16), torch.zeros(3, E + 1))
    x = torch.zeros(3, H, dtype=torch.bfloat16)
    w, ids = torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.int64)
    for bad in [(w, ids.float()), (w[:2], ids), (w, ids[:, :1]), (ids, ids), (w,), "topk"]:
        with pytest.raises(ValueError, match=r"topk must be \(float weights, integer expert ids\), each \[T=3, top"):
            moe(x, topk=bad)
    with pytest.raises(ValueError, match=r"w4a4 needs input_scales"):
        NVFP4MoE.from_experts(torch.zeros(E, I, H), torch.zeros(E, I, H), torch.zeros(E, H, I), 2, mode="w4a4")


def test_rows_quantized_as_the_linear_layer(device, gen):
    """A row times its expert's global scale in float32, quantized with none, is quantize(row, g):
    fp32(amax g) = amax of fp32(x g) (g > 0) and the codes see fp32(x g) either way."""
    x = (torch.randn(7, H, generator=gen) * torch.exp2(torch.randint(-10, 10, (7, 1), generator=gen).float()))
    x = x.bfloat16().to(device)
    for g in (0.37, 1e-3, 4096.0 / 3):
        a = nk.quantize(x.float() * torch.tensor(g, device=device).float())
        b = nk.quantize(x, global_scale=torch.tensor(g, dtype=torch.float32, device=device))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1].view(torch.uint8), b[1].view(torch.uint8))


def test_modelopt_checkpoint_experts(tmp_path, gen):
    """A Qwen3-MoE quantized and saved as ModelOpt does (routers left in bf16, each expert's
    gate_proj / up_proj / down_proj an NVFP4 layer, gate and up sharing their scales) loads; its
    experts stacked by NVFP4MoE.from_linears hold them tensor for tensor and compute the block as
    the per-token loop does. transformers' own loop over the loaded experts rounds silu(g) * u,
    the routing weights and the sums to bf16, so a W4A4 input code flips here and there: the two
    agree to a few percent of the largest output (a swapped or misrouted expert: ~100%)."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    from nvfp4_kernels.models import load_checkpoint, quantize_model, save_modelopt

    cfg = transformers.Qwen3MoeConfig(hidden_size=H, intermediate_size=128, moe_intermediate_size=I,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      vocab_size=256, num_experts=E, num_experts_per_tok=2, norm_topk_prob=True,
                                      architectures=["Qwen3MoeForCausalLM"])
    torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    quantize_model(model, mode="w4a4", calibration=[torch.randint(0, 256, (4, 32), generator=gen) for _ in range(2)])
    assert type(model.model.layers[0].mlp.gate) is not NVFP4Linear, "the router is ModelOpt's default exclusion"
    save_modelopt(model, tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    load_checkpoint(loaded, tmp_path)
    mlp = loaded.model.layers[0].mlp
    experts = list(mlp.experts)
    assert all(type(ex.gate_proj) is NVFP4Linear for ex in experts)
    moe = NVFP4MoE.from_linears([ex.gate_proj for ex in experts], [ex.up_proj for ex in experts],
                                [ex.down_proj for ex in experts], cfg.num_experts_per_tok, norm_topk_prob=True)
    for e, ex in enumerate(experts):
        assert torch.equal(moe.weight_codes("w13_weight")[e], torch.cat([ex.gate_proj.weight, ex.up_proj.weight]))
        assert torch.equal(moe.w2_weight_scale[e].view(torch.uint8), ex.down_proj.weight_scale.view(torch.uint8))
        assert torch.equal(moe.w13_input_scale[e], ex.up_proj.input_scale)
    x = (torch.randn(20, H, generator=gen) * 3).bfloat16()
    with torch.no_grad():
        logits = F.linear(x, mlp.gate.weight)  # the router's logits (transformers 5's router returns more)
        assert torch.equal(moe(x, logits), per_token(moe, x, logits))
        # the router's choice as transformers makes it (softmax, torch.topk): bf16 logits tie now and then,
        # and torch.topk may rank a tie either way where moe_route takes the lower index; elsewhere the same
        p = F.softmax(logits, dim=1, dtype=torch.float)
        w, ids = p.topk(cfg.num_experts_per_tok, -1)
        k = cfg.num_experts_per_tok
        untied = p.sort(-1, descending=True)[0][:, k - 1] != p.sort(-1, descending=True)[0][:, k]
        ours = moe.route(logits)[1].long().sort(-1)[0]
        assert untied.any() and torch.equal(ours[untied], ids.sort(-1)[0][untied])
        got = moe(x, topk=(w / w.sum(-1, keepdim=True), ids))
        theirs = mlp(x[None])
        theirs = (theirs[0] if isinstance(theirs, tuple) else theirs)[0]
    err = (got.float() - theirs.float()).abs().max() / theirs.float().abs().max()
    assert err < 0.15, float(err)
    bad = NVFP4Linear(H, I, bias=False)
    bad.input_scale.fill_(2.0)
    with pytest.raises(ValueError, match=r"expert 0's gate and up have input_scale 2.0 and 1.0"):
        NVFP4MoE.from_linears([bad], [NVFP4Linear(H, I, bias=False)], [NVFP4Linear(I, H, bias=False)], 1)


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral", "deepseek_v3"])
def test_from_pretrained_swaps_moe_blocks(tmp_path, gen, arch):
    """hf.from_pretrained of a quantized Qwen3-MoE / Mixtral checkpoint stacks each sparse MoE
    block's NVFP4 experts into one NVFP4MoEBlock: the same router, the block's routing, the per-token
    arithmetic bit for bit, the model's logits within the bf16 roundings of transformers' own loop
    (see test_modelopt_checkpoint_experts), and generate runs."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    pytest.importorskip("safetensors", reason="needs safetensors")
    from nvfp4_kernels.models import NVFP4MoEBlock, hf, load_checkpoint, quantize_model, save_modelopt
    from nvfp4_kernels.models import moe as moe_blocks

    common = dict(hidden_size=H, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  vocab_size=256, num_experts_per_tok=2)
    if arch == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(intermediate_size=128, moe_intermediate_size=I, num_experts=E,
                                          norm_topk_prob=False, architectures=["Qwen3MoeForCausalLM"], **common)
    elif arch == "mixtral":
        cfg = transformers.MixtralConfig(intermediate_size=I, num_local_experts=E, architectures=["MixtralForCausalLM"],
                                         **common)
    else:  # grouped sigmoid routing, a shared expert, multi-head latent attention
        common.update(num_key_value_heads=4)
        cfg = transformers.DeepseekV3Config(intermediate_size=128, moe_intermediate_size=I, n_routed_experts=E,
                                            n_shared_experts=1, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                                            first_k_dense_replace=0, q_lora_rank=32, kv_lora_rank=32,
                                            qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                                            architectures=["DeepseekV3ForCausalLM"], **common)
    torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    # model.layers.0.mlp, Mixtral's model.layers.0.block_sparse_moe before transformers 5
    block_name = next(n for n, m in model.named_modules() if type(m).__name__ in moe_blocks.BLOCKS)
    quantize_model(model, mode="w4a4", calibration=[torch.randint(0, 256, (4, 32), generator=gen) for _ in range(2)])
    if arch == "deepseek_v3":  # a float32 routing bias, as DeepSeek's checkpoints hold it
        bias = torch.rand(E, generator=gen) * 0.1 + 1e-3
        model.get_submodule(block_name).gate.e_score_correction_bias = bias
    save_modelopt(model, tmp_path)
    if arch == "mixtral":  # the block's name before transformers 5 (which calls it mlp), as 5 saves it too
        from safetensors import safe_open

        with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
            assert "model.layers.0.block_sparse_moe.experts.3.w2.weight" in set(f.keys())
    fast, report = hf.from_pretrained(tmp_path, return_report=True)
    assert report.moe_blocks == [block_name]
    block = fast.get_submodule(block_name)
    assert type(block) is NVFP4MoEBlock and block.experts.norm_topk_prob == (arch != "qwen3_moe")
    if arch == "deepseek_v3":
        moe = block.experts
        assert (moe.routing, moe.n_group, moe.topk_group, moe.routed_scaling_factor) == ("sigmoid", 4, 2, 2.5)
        assert torch.equal(moe.e_score_correction_bias, block.gate.e_score_correction_bias.float())
        # kept in float32 where transformers keeps it so (5: _keep_in_fp32_modules_strict), else the model's dtype
        keep = "e_score_correction_bias" in (getattr(type(fast), "_keep_in_fp32_modules_strict", None) or ())
        assert torch.equal(moe.e_score_correction_bias, bias if keep else bias.bfloat16().float())
        assert type(block.shared_experts.gate_proj) is NVFP4Linear
    looped = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    load_checkpoint(looped, tmp_path)
    x = (torch.randn(2, 7, H, generator=gen) * 3).bfloat16()
    ids = torch.randint(0, 256, (2, 9), generator=gen)
    # transformers 4.x's Qwen3-MoE / Mixtral blocks return (out, router logits); 5's (whose router is
    # no nn.Linear) and DeepSeek's out alone
    assert block.returns_logits == isinstance(looped.get_submodule(block_name).gate, torch.nn.Linear)
    with torch.no_grad():
        out = block(x)
        out = out[0] if block.returns_logits else out
        x2 = x.reshape(-1, H)
        routed = block.gate(x2)  # transformers 5's routers: (logits, top-k weights, ids), which the block takes
        topk = routed[1:] if block.router_call == "first" else None
        want = per_token(block.experts, x2, block.router_logits(x2), topk)
        if block.shared_experts is not None:
            want = want + block.shared_experts(x2)
        assert torch.equal(out.reshape(-1, H), want)
        a, b = fast(ids).logits.float(), looped(ids).logits.float()
        assert (a - b).abs().max() / b.abs().max() < 0.15
        # min_new_tokens: random weights may pick the end-of-sequence token first
        out = fast.generate(ids[:1], max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
        assert out.shape == (1, 13)
        if arch != "deepseek_v3":  # runs; in 5 the router's hooks record the logits for the auxiliary loss
            aux = fast(ids, output_router_logits=True).aux_loss
            assert not block.gate.__class__.__name__.endswith("Router") or torch.isfinite(aux) and aux > 0


def test_compressed_tensors_experts(gen):
    """compressed-tensors experts (multipliers, not divisors) stack with their exact activation
    multipliers and alphas (re-deriving them from divisors can round differently); the MoE then
    computes what a per-token loop over the same values does, and what the layers' own tensors give
    through the dense ops in the MoE's rounding order (gate and up as one dual: silu(gate) * up in
    fp32, rounded once; the layers one by one round each, and a moved bf16 value can move an fp4 code
    of the down projection's quantized input); unequal gate / up input multipliers are refused."""
    from nvfp4_kernels.models import CompressedTensorsNVFP4Linear

    def layer(n, k, g_x):
        m = CompressedTensorsNVFP4Linear(k, n, bias=False, mode="w4a4")
        w = torch.randn(n, k, generator=gen) * 0.1
        g_w = torch.tensor([2688 / float(w.abs().max())])
        m.weight_global_scale.copy_(g_w)
        m.weight, m.weight_scale = nk.quantize(w, global_scale=g_w)
        m.input_global_scale.fill_(g_x)
        m.update_derived_scales()
        return m

    g_x = [2688 / (float(torch.rand((), generator=gen)) * 3 + 0.5) for _ in range(2 * E)]
    gates = [layer(I, H, g_x[e]) for e in range(E)]
    ups = [layer(I, H, g_x[e]) for e in range(E)]
    downs = [layer(H, I, g_x[E + e]) for e in range(E)]
    moe = NVFP4MoE.from_linears(gates, ups, downs, 2)
    for e in range(E):
        assert moe._alpha1[e] == gates[e]._alpha and moe._alpha3[e] == ups[e]._alpha
        assert moe._alpha2[e] == downs[e]._alpha and moe._w2_input_global[e] == downs[e]._input_global_scale
        assert moe._w13_input_global[e] == gates[e]._input_global_scale == torch.tensor(g_x[e])
    x = (torch.randn(12, H, generator=gen) * 3).bfloat16()
    logits = torch.randn(12, E, generator=gen)
    with torch.no_grad():
        got = moe(x, logits)
        assert torch.equal(got, per_token(moe, x, logits))
        weights, ids = moe.route(logits)

        def expert(e, xt):
            g, u = gates[e], ups[e]
            h = nk.dual_gemm_w4a4(xt, g.weight, u.weight, g.weight_scale, u.weight_scale,
                                  global_scale=g._input_global_scale, alpha1=g._alpha, alpha2=u._alpha)
            return downs[e](h)[0].float()

        theirs = torch.stack([sum(float(weights[t, j]) * expert(int(ids[t, j]), x[t:t + 1]) for j in range(2))
                              for t in range(12)])
    # the CPU kernels' sums are the same C code: the MoE's output is theirs rounded to bf16 once (a relative
    # error of at most 2^-8 of the largest), with room for the fp32 combine's order
    err = (got.float() - theirs).abs().max() / theirs.abs().max()
    assert err < 2**-7, float(err)
    ups[3] = layer(I, H, g_x[3] * 2)
    with pytest.raises(ValueError, match="expert 3's gate and up have input_global_scale"):
        NVFP4MoE.from_linears(gates, ups, downs, 2)


def test_from_pretrained_compressed_tensors_moe(tmp_path, gen):
    """An llm-compressor (compressed-tensors) NVFP4 Qwen3-MoE checkpoint: from_pretrained stacks its
    experts into one NVFP4MoE with the layers' exact scales; logits within the roundings of
    transformers' own loop over the same layers."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    pytest.importorskip("safetensors", reason="needs safetensors")
    from test_checkpoints import ct_config, ct_tensors, write
    from nvfp4_kernels.models import NVFP4MoEBlock, hf, load_checkpoint
    from nvfp4_kernels.models.moe import unfuse_experts

    cfg = transformers.Qwen3MoeConfig(hidden_size=H, intermediate_size=128, moe_intermediate_size=I, num_experts=E,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      vocab_size=256, num_experts_per_tok=2, architectures=["Qwen3MoeForCausalLM"])
    torch.manual_seed(int(torch.randint(0, 2**31, (), generator=gen)))
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    unfuse_experts(model)  # transformers 5: per-expert layers, as the checkpoint names them
    ignore = ("lm_head", "model.layers.0.mlp.gate")
    tensors = ct_tensors(model, gen, exclude=ignore)
    for e in range(E):  # one input multiplier for an expert's gate and up (one quantization feeds both)
        pre = f"model.layers.0.mlp.experts.{e}."
        tensors[pre + "up_proj.input_global_scale"] = tensors[pre + "gate_proj.input_global_scale"]
    config = dict(cfg.to_dict(), quantization_config=ct_config(ignore=ignore)["quantization_config"])
    write(tmp_path, tensors, config=config)
    fast, report = hf.from_pretrained(tmp_path, return_report=True)
    assert report.moe_blocks == ["model.layers.0.mlp"]
    block = fast.model.layers[0].mlp
    assert type(block) is NVFP4MoEBlock
    looped = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    load_checkpoint(looped, tmp_path)
    experts = looped.model.layers[0].mlp.experts
    for e in range(E):
        assert block.experts._alpha1[e] == experts[e].gate_proj._alpha
        assert block.experts._w2_input_global[e] == experts[e].down_proj._input_global_scale
    ids = torch.randint(0, 256, (2, 9), generator=gen)
    with torch.no_grad():
        a, b = fast(ids).logits.float(), looped(ids).logits.float()
    assert (a - b).abs().max() / b.abs().max() < 0.15
