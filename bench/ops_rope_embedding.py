"""embedding, embedding_bwd_w, rope and rope_bwd vs PyTorch CPU eager.

Shapes: 4 x 512 tokens, hidden 512, vocab 8192, 8 heads x 64, rope theta 500000 (--quick:
1 x 128 tokens). Peers:
  embedding fwd    torch.nn.functional.embedding(ids, table)
  embedding bwd    d_table.index_add_(0, ids, d_out.float())   (accumulate into fp32, as ours)
  rope fwd         HF LlamaRotaryEmbedding + apply_rotary_pos_emb (cos/sin from positions, then
                   the rotation); rope_apply_only: the rotation with cos/sin precomputed, which is
                   what a model pays per layer once HF shares cos/sin across layers
  rope bwd         autograd of the rotation (cos/sin precomputed)
All are memory-bound; their working sets (4 MiB at fp32) fit in the last-level cache, so of_memcpy
(against DRAM memcpy) can pass 1.

    python bench/ops_rope_embedding.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402

df = harness.import_dataflow()

HIDDEN, VOCAB, HEADS, HEAD_DIM = 512, 8192, 8, 64


def rotate_half(x):
    return torch.cat((-x[..., HEAD_DIM // 2:], x[..., : HEAD_DIM // 2]), dim=-1)


def _cases(h, dtype, seqs, seq_len):
    tokens = seqs * seq_len
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, tokens).astype(np.int32)
    pos = np.tile(np.arange(seq_len, dtype=np.int32), seqs)
    inv_freq = df.ops.rope_inv_freq(HEAD_DIM, 500000.0)
    d_ids, d_pos, d_freq = h.from_numpy(ids), h.from_numpy(pos), h.from_numpy(inv_freq)
    t_ids, t_pos, t_freq = harness.tensor(ids).long(), harness.tensor(pos).long(), harness.tensor(inv_freq)
    td = getattr(torch, harness.TORCH_DTYPES[dtype])
    size = 4 if dtype == "fp32" else 2
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    d_out = rng.standard_normal((tokens, HIDDEN)).astype(np.float32)
    x = rng.standard_normal((tokens, HEADS, HEAD_DIM)).astype(np.float32)
    a_table, a_dout, a_x = (h.from_numpy(v, dtype=dtype) for v in (table, d_out, x))
    a_out, a_dtable, a_y = h.empty((tokens, HIDDEN), dtype), h.zeros((VOCAB, HIDDEN)), h.empty(a_x.shape, dtype)
    tt, tdout, tx = (harness.tensor(v).to(td) for v in (table, d_out, x))
    tdtable = torch.zeros(VOCAB, HIDDEN)

    def cos_sin():
        freqs = t_pos[:, None].float() * t_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(td)[:, None, :], emb.sin().to(td)[:, None, :]

    def torch_rope():
        cos, sin = cos_sin()
        return tx * cos + rotate_half(tx) * sin

    cos, sin = cos_sin()
    txg = tx.clone().requires_grad_()
    yg = txg * cos + rotate_half(txg) * sin
    tdy = torch.ones_like(yg)

    emb_shape, rope_shape = f"{tokens} of {VOCAB}x{HIDDEN}", f"{tokens}x{HEADS}x{HEAD_DIM}"
    rope_bytes = 2 * tokens * HEADS * HEAD_DIM * size  # x read, y written
    yield Case("embedding", "fwd", dtype, emb_shape,
               harness.synced(h, lambda: df.ops.embedding(h, d_ids, a_table, out=a_out)),
               lambda: torch.nn.functional.embedding(t_ids, tt), "F.embedding",
               bytes=2 * tokens * HIDDEN * size)  # rows read, out written
    yield Case("embedding", "bwd", dtype, emb_shape,
               harness.synced(h, lambda: df.ops.embedding_bwd_w(h, d_ids, a_dout, a_dtable)),
               lambda: tdtable.index_add_(0, t_ids, tdout.float()), "fp32 d_table.index_add_(0, ids, d_out.float())",
               bytes=tokens * HIDDEN * (size + 8))  # d_out read, fp32 d_table rows read and written
    yield Case("rope", "fwd", dtype, rope_shape,
               harness.synced(h, lambda: df.ops.rope(h, a_x, d_pos, d_freq, out=a_y)), torch_rope,
               "HF LlamaRotaryEmbedding + apply_rotary_pos_emb", bytes=rope_bytes)
    yield Case("rope_apply_only", "fwd", dtype, rope_shape,
               harness.synced(h, lambda: df.ops.rope(h, a_x, d_pos, d_freq, out=a_y)),
               lambda: tx * cos + rotate_half(tx) * sin, "HF rotation, cos/sin precomputed", bytes=rope_bytes)
    yield Case("rope", "bwd", dtype, rope_shape,
               harness.synced(h, lambda: df.ops.rope_bwd(h, a_x, d_pos, d_freq, dx=a_y)),
               lambda: torch.autograd.grad(yg, txg, tdy, retain_graph=True),
               "autograd of the HF rotation, cos/sin precomputed", bytes=rope_bytes)


def cases(h, args):
    seqs, seq_len = (1, 128) if args.quick else (4 * args.scale, 512)
    for dtype in args.dtypes:
        yield from _cases(h, dtype, seqs, seq_len)


if __name__ == "__main__":
    harness.main({"rope_embedding": cases})
