"""One MoE block (benchmarks.bench_moe's random experts and routing), after a warm-up, for Nsight
Compute; dev/ncu.sh runs it for a shape that starts with "moe":
    KERNEL=w4a16_kernel bash dev/ncu.sh "moe 8 uniform w4a16" "moe 64 skewed w4a4 qwen3-30b-a3b"
    python dev/moe_call.py T ROUTING MODE [MODEL]    (ROUTING uniform / skewed, MODE w4a16 / w4a4)"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's benchmarks package
from benchmarks.bench_moe import MODELS, logits_of, random_moe  # noqa: E402

t, routing, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
model = sys.argv[4] if len(sys.argv) > 4 else "deepseek-v3"
h, i, e, k = MODELS[model]
gen = torch.Generator(device="cuda").manual_seed(0)
logits = logits_of(t, e, routing, gen)
x = torch.randn(t, h, generator=gen, device="cuda", dtype=torch.bfloat16)
moe = random_moe(h, i, e, k, mode, gen)
for _ in range(3):
    moe(x, logits)
torch.cuda.synchronize()
print("done", t, routing, mode, model)
