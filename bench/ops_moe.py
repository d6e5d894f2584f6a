"""A mixture-of-experts feed-forward block (Qwen3-MoE's) forward vs Hugging Face transformers'
Qwen3MoeSparseMoeBlock on the same weights, on the CPU.

Ours: gate matmul (fp32 logits), moe_router (softmax, top-k, renormalized), moe_permute,
moe_grouped_matmul for gate and up (the halves of HF's gate_up_proj), swiglu,
moe_grouped_matmul for down, moe_combine. Peers: the HF block with its experts run by
transformers' "eager" implementation (a Python loop over the experts hit) and by "grouped_mm"
(torch's grouped matmul). Shapes: 512 tokens, hidden 512, moe_intermediate 256, 8 experts,
top-2 (--quick: 64 tokens, hidden 128, intermediate 64). Compute-bound: flops count the gate,
the three expert matmuls of each routed token.

    python bench/ops_moe.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import numpy as np

import harness
from harness import Case

harness.require_peers("torch", "transformers")  # before importing them: one line, not a traceback
import torch  # noqa: E402
from transformers import Qwen3MoeConfig  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock  # noqa: E402

df = harness.import_dataflow()

EXPERTS, TOP_K = 8, 2


def hf_block(hidden, inter, implementation, dtype, seed=0):
    config = Qwen3MoeConfig(hidden_size=hidden, moe_intermediate_size=inter, num_experts=EXPERTS,
                            num_experts_per_tok=TOP_K, norm_topk_prob=True)
    config._experts_implementation = implementation
    torch.manual_seed(seed)
    block = Qwen3MoeSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, hidden ** -0.5)
    return block.to(getattr(torch, harness.TORCH_DTYPES[dtype])).eval()


def _block(h, dtype, tokens, hidden, inter, implementation):
    block = hf_block(hidden, inter, implementation, dtype)
    f32 = lambda t: t.detach().float().numpy()  # noqa: E731
    gate_up = f32(block.experts.gate_up_proj)
    a_gate_w = h.from_numpy(f32(block.gate.weight), dtype=dtype)
    a_wg = h.from_numpy(np.ascontiguousarray(gate_up[:, :inter]), dtype=dtype)
    a_wu = h.from_numpy(np.ascontiguousarray(gate_up[:, inter:]), dtype=dtype)
    a_wd = h.from_numpy(f32(block.experts.down_proj), dtype=dtype)
    x = np.random.default_rng(1).standard_normal((tokens, hidden)).astype(np.float32)
    a_x = h.from_numpy(x, dtype=dtype)
    tx = harness.tensor(x).to(getattr(torch, harness.TORCH_DTYPES[dtype]))[None]
    n = tokens * TOP_K
    logits = h.empty((tokens, EXPERTS), "fp32")
    routed = [h.empty((tokens, EXPERTS), "fp32"), h.empty((tokens, TOP_K), "fp32"), h.empty((tokens, TOP_K), "int32")]
    permuted = [h.empty((n, hidden), dtype), h.empty((EXPERTS + 1,), "int32"), h.empty((n,), "int32"),
                h.empty((tokens, TOP_K), "int32")]
    gate, up, act, down, y = (h.empty((n, inter), dtype), h.empty((n, inter), dtype), h.empty((n, inter), dtype),
                              h.empty((n, hidden), dtype), h.empty((tokens, hidden), dtype))

    def ours():
        df.ops.matmul(h, a_x, a_gate_w, out=logits, transpose_b=True, out_dtype="fp32")
        probs, weights, ids = df.ops.moe_router(h, logits, TOP_K, True, *routed)
        x_perm, offsets, _, slot_of = df.ops.moe_permute(h, a_x, ids, EXPERTS, *permuted)
        df.ops.moe_grouped_matmul(h, x_perm, a_wg, offsets, out=gate)
        df.ops.moe_grouped_matmul(h, x_perm, a_wu, offsets, out=up)
        df.ops.swiglu(h, gate, up, out=act)
        df.ops.moe_grouped_matmul(h, act, a_wd, offsets, out=down)
        df.ops.moe_combine(h, down, slot_of, weights, y=y)

    def peer():
        with torch.no_grad():
            return block(tx)
    flops = 2.0 * tokens * hidden * EXPERTS + 3 * 2.0 * n * hidden * inter
    return Case("moe_block", "fwd", dtype, f"{tokens}x{hidden} I{inter} E{EXPERTS} k{TOP_K}", harness.synced(h, ours),
                peer, f"Qwen3MoeSparseMoeBlock ({implementation} experts)", flops=flops)


def cases(h, args):
    tokens, hidden, inter = (64, 128, 64) if args.quick else (512 * args.scale, 512, 256)
    for dtype in args.dtypes:
        for implementation in ("eager", "grouped_mm"):
            yield _block(h, dtype, tokens, hidden, inter, implementation)


if __name__ == "__main__":
    harness.main({"moe": cases})
