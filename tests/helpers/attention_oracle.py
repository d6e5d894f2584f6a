"""The attention oracle (torch, per document of a packed batch) and its comparison, shared by the
attention, window and paged attention tests."""
import numpy as np
import torch

import dataflow as df
from tolerances import ATTENTION_TOLERANCES, attention_out_tolerance


def offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def assert_attention_close(h, got, want, dtype, what, v):
    """v: the values (their largest magnitude and count bound the error of a P rounded to
    dtype, which cuda's tensor-core kernels do; see attention_out_tolerance)."""
    tol = ATTENTION_TOLERANCES[dtype]
    (out, lse, grads), (w_out, w_lse, w_grads) = got, want
    out_tol = attention_out_tolerance(dtype, float(np.abs(v).max(initial=0)), v.shape[0], h.backend == "cuda")
    np.testing.assert_allclose(out.numpy().astype(np.float32), w_out, err_msg=f"{what}: out", **out_tol)
    np.testing.assert_allclose(lse.numpy(), w_lse, rtol=0, atol=tol["lse_atol"], err_msg=f"{what}: lse")
    for name, g, w in zip(("dq", "dk", "dv"), grads or (), w_grads or ()):
        np.testing.assert_allclose(g.numpy().astype(np.float32), w, rtol=tol["grad_rtol"],
                                   atol=tol["grad_atol"] * np.abs(w).max(), err_msg=f"{what}: {name}")


def kv_mask(lq, lk, causal=True, window=0):
    """Query i of lq (at key position pos = i + lk - lq, bottom-right aligned) sees key j of lk
    when j <= pos (causal) and, with a sliding window, j > pos - window: transformers'
    sliding_window_overlay (kv_idx > q_idx - sliding_window) with its causal mask."""
    if not causal:
        return torch.ones(lq, lk, dtype=torch.bool)
    pos, j = torch.arange(lq)[:, None] + (lk - lq), torch.arange(lk)[None, :]
    return (j <= pos) & (j > pos - window) if window else j <= pos


def oracle_kv(q, k, v, cu_q, cu_k, scale, causal=True, dout=None, window=0):
    """torch fp32 SDPA per sequence with an explicit mask (kv_mask). Returns out, lse
    (q_heads, total_q), and with dout also (dq, dk, dv) by autograd."""
    q, k, v = (torch.from_numpy(x).requires_grad_(dout is not None) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for (qa, qb), (ka, kb) in zip(zip(cu_q[:-1], cu_q[1:]), zip(cu_k[:-1], cu_k[1:])):
        qs = q[qa:qb].transpose(0, 1)
        ks = k[ka:kb].repeat_interleave(group, dim=1).transpose(0, 1)
        vs = v[ka:kb].repeat_interleave(group, dim=1).transpose(0, 1)
        lq, lk = qb - qa, kb - ka
        allowed = kv_mask(lq, lk, causal, window)
        outs.append(torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed, scale=scale)
                    .transpose(0, 1))
        scores = ((qs @ ks.transpose(1, 2)) * scale).masked_fill(~allowed, -float("inf"))
        lses.append(torch.logsumexp(scores, dim=-1))
    out, lse = torch.cat(outs), torch.cat(lses, dim=1)
    if dout is None:
        return out.detach().numpy(), lse.detach().numpy()
    out.backward(torch.from_numpy(dout))
    return out.detach().numpy(), lse.detach().numpy(), [x.grad.numpy() for x in (q, k, v)]


def assert_chunks_equal_whole_sequence(h, q, k, v, dout, chunks, window=0):
    """A sequence in chunks as the ring runs it: each chunk's attention_kv over the K/V of the
    chunks before it and itself, the backward in reverse chunk order adding into one fp32 dK/dV
    context; each chunk's output and dq, dk, dv equal attention over the whole sequence (fp32)."""
    total = sum(chunks)
    dev = [h.from_numpy(x) for x in (q, k, v)]
    out, lse = df.ops.attention(h, *dev, [0, total], window=window)
    w_dq, w_dk, w_dv = (x.numpy() for x in df.ops.attention_bwd(h, h.from_numpy(dout), *dev, out, lse, [0, total],
                                                                 window=window))
    dk, dv = h.zeros(k.shape), h.zeros(v.shape)
    dq = []
    ends = np.cumsum(chunks)
    for a, b in reversed(list(zip(ends - chunks, ends))):
        ctx = [h.from_numpy(x[:b]) for x in (k, v)]
        qc = h.from_numpy(q[a:b])
        o, l = df.ops.attention_kv(h, qc, *ctx, [0, b - a], [0, b], window=window)
        np.testing.assert_allclose(o.numpy(), out.numpy()[a:b], rtol=1e-5, atol=1e-6)
        g, gk, gv = df.ops.attention_kv_bwd(h, h.from_numpy(dout[a:b]), qc, *ctx, o, l, [0, b - a], [0, b],
                                            window=window)
        dq.insert(0, g.numpy())
        dk_all, dv_all = dk.numpy(), dv.numpy()  # the context rows so far, plus this chunk's
        dk_all[:b] += gk.numpy()
        dv_all[:b] += gv.numpy()
        dk, dv = h.from_numpy(dk_all), h.from_numpy(dv_all)
    np.testing.assert_allclose(np.concatenate(dq), w_dq, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dk.numpy(), w_dk, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dv.numpy(), w_dv, rtol=1e-5, atol=1e-5)
