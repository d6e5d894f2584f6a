"""embedding / embedding_bwd_w / rope / rope_bwd on the host backend vs PyTorch CPU eager,
same shapes, dtype and thread count (2), in the same run. Prints JSON, then one summary line.

Shapes: 4 x 512 tokens, hidden 512, vocab 8192, 8 heads x 64. Peers:
  embedding        torch.nn.functional.embedding(ids, table)
  embedding_bwd_w  d_table.index_add_(0, ids, d_out.float())   (accumulate into fp32, as ours)
  rope             HF LlamaRotaryEmbedding + apply_rotary_pos_emb (cos/sin from positions, then
                   the rotation); rope_apply_only: the rotation with cos/sin precomputed, which is
                   what a model pays per layer once HF shares cos/sin across layers
  rope_bwd         autograd of the rotation (cos/sin precomputed)
Ratio = torch time / dataflow time (> 1: dataflow faster). Median of repeats, h.sync() included."""
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import dataflow as df  # noqa: E402

TOKENS, HIDDEN, VOCAB, HEADS, HEAD_DIM = 4 * 512, 512, 8192, 8, 64
TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def median_times(ours, peer, repeats=100, warmup=5):
    """Median seconds of each, alternating calls so machine noise hits both alike."""
    for _ in range(warmup):
        ours()
        peer()
    times = ([], [])
    for _ in range(repeats):
        for fn, out in ((ours, times[0]), (peer, times[1])):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def rotate_half(x):
    return torch.cat((-x[..., HEAD_DIM // 2:], x[..., : HEAD_DIM // 2]), dim=-1)


def main():
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, TOKENS).astype(np.int32)
    pos = np.tile(np.arange(512, dtype=np.int32), 4)
    inv_freq = df.ops.rope_inv_freq(HEAD_DIM, 500000.0)
    results = []
    with df.Handle("host", threads=2, device_memory="1GiB") as h:
        d_ids, d_pos, d_freq = h.from_numpy(ids), h.from_numpy(pos), h.from_numpy(inv_freq)
        t_ids, t_pos, t_freq = torch.from_numpy(ids).long(), torch.from_numpy(pos).long(), torch.from_numpy(inv_freq)
        for dtype in ("fp32", "bf16"):
            td = TORCH[dtype]
            table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
            d_out = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
            x = rng.standard_normal((TOKENS, HEADS, HEAD_DIM)).astype(np.float32)
            a_table, a_dout, a_x = (h.from_numpy(v, dtype=dtype) for v in (table, d_out, x))
            a_out, a_dtable, a_y = h.empty((TOKENS, HIDDEN), dtype), h.zeros((VOCAB, HIDDEN)), h.empty(a_x.shape, dtype)
            tt, tdout, tx = (torch.from_numpy(v).to(td) for v in (table, d_out, x))
            tdtable = torch.zeros(VOCAB, HIDDEN)

            def sync_op(fn):
                def run():
                    fn()
                    h.sync()
                return run

            def torch_rope():
                freqs = (t_pos[:, None].float() * t_freq[None, :])
                emb = torch.cat((freqs, freqs), dim=-1)
                cos, sin = emb.cos().to(td)[:, None, :], emb.sin().to(td)[:, None, :]
                return tx * cos + rotate_half(tx) * sin

            freqs = t_pos[:, None].float() * t_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(td)[:, None, :], emb.sin().to(td)[:, None, :]
            txg = tx.clone().requires_grad_()
            yg = txg * cos + rotate_half(txg) * sin
            tdy = torch.ones_like(yg)

            cases = [
                ("embedding", sync_op(lambda: df.ops.embedding(h, d_ids, a_table, out=a_out)),
                 lambda: torch.nn.functional.embedding(t_ids, tt)),
                ("embedding_bwd_w", sync_op(lambda: df.ops.embedding_bwd_w(h, d_ids, a_dout, a_dtable)),
                 lambda: tdtable.index_add_(0, t_ids, tdout.float())),
                ("rope", sync_op(lambda: df.ops.rope(h, a_x, d_pos, d_freq, out=a_y)), torch_rope),
                ("rope_apply_only", sync_op(lambda: df.ops.rope(h, a_x, d_pos, d_freq, out=a_y)),
                 lambda: tx * cos + rotate_half(tx) * sin),
                ("rope_bwd", sync_op(lambda: df.ops.rope_bwd(h, a_x, d_pos, d_freq, dx=a_y)),
                 lambda: torch.autograd.grad(yg, txg, tdy, retain_graph=True)),
            ]
            for name, ours, peer in cases:
                t_ours, t_torch = median_times(ours, peer)
                results.append(dict(op=name, dtype=dtype, dataflow_ms=t_ours * 1e3, torch_ms=t_torch * 1e3,
                                    ratio=t_torch / t_ours))
        # memcpy bandwidth in the same run, for the memory-bound embedding forward
        src = np.ones(TOKENS * HIDDEN, np.float32)
        dst = np.empty_like(src)
        t_copy = median_times(lambda: np.copyto(dst, src), lambda: None)[0]
        copy_gbs = 2 * src.nbytes / t_copy / 1e9
        for r in results:
            if r["op"] == "embedding":
                nbytes = 2 * TOKENS * HIDDEN * (4 if r["dtype"] == "fp32" else 2)
                r["gbs"] = nbytes / (r["dataflow_ms"] * 1e-3) / 1e9
                r["of_memcpy"] = r["gbs"] / copy_gbs
    print(json.dumps(dict(shapes=dict(tokens=TOKENS, hidden=HIDDEN, vocab=VOCAB, heads=HEADS, head_dim=HEAD_DIM),
                          threads=2, memcpy_gbs=copy_gbs, results=results), indent=1))
    print("summary: " + ", ".join(f"{r['op']}[{r['dtype']}] {r['ratio']:.2f}x" for r in results)
          + f" (torch time / dataflow time; memcpy {copy_gbs:.1f} GB/s)")


if __name__ == "__main__":
    main()
