"""Fused softmax cross-entropy (loss and dlogits in one op) vs PyTorch CPU.

Shapes: 4 x 512 tokens, vocab 8192 and 128256 (Llama 3) (--quick: 256 tokens, vocab 8192).
dataflow: cross_entropy with scale = 1/tokens and dlogits, labels already on the device.
torch: F.cross_entropy(reduction="mean") + backward() on a leaf tensor. The op is memory-bound:
it must read the logits and write dlogits, the traffic of one memcpy of the logits (it also
reads each row a second time, from cache for rows under ~1 MiB).

    python bench/ops_cross_entropy.py [--threads 2] [--dtypes fp32,bf16] [--quick]
"""
import numpy as np

import harness
from harness import Case

harness.require_peers("torch")  # before importing it: a missing torch is one line, not a traceback
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

df = harness.import_dataflow()


def _case(h, tokens, vocab, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, vocab), dtype=np.float32) * 3
    y = rng.integers(0, vocab, tokens).astype(np.int32)
    logits, labels = h.from_numpy(x, dtype=dtype), h.from_numpy(y)
    dlogits = h.empty((tokens, vocab), dtype)
    tx = harness.tensor(x).to(getattr(torch, harness.TORCH_DTYPES[dtype])).requires_grad_()
    ty = harness.tensor(y).long()

    def theirs():
        tx.grad = None
        F.cross_entropy(tx, ty).backward()

    return Case("cross_entropy", "fwd+bwd", dtype, f"{tokens}x{vocab}",
                harness.synced(h, lambda: df.ops.cross_entropy(h, logits, labels, scale=1.0 / tokens, dlogits=dlogits)),
                theirs, "F.cross_entropy(mean) + backward()", bytes=2 * logits.nbytes)


def cases(h, args):
    shapes = [(256, 8192)] if args.quick else [(4 * 512 * args.scale, 8192), (4 * 512, 128256)]  # 128k: 1 GiB bf16 already
    for tokens, vocab in shapes:
        for dtype in args.dtypes:
            yield _case(h, tokens, vocab, dtype)


if __name__ == "__main__":
    harness.main({"cross_entropy": cases})
