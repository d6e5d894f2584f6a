"""Per-dtype tolerances for comparing an op's output with a PyTorch (or numpy) oracle that
computes in fp32 and rounds once to the output dtype: torch.testing.assert_close's defaults,
about one unit in the last place of each format. Ops whose oracle accumulates differently
(reductions, matmul) add their own entries here rather than loosening these.

    np.testing.assert_allclose(got, want, **TOLERANCES["bf16"])
"""

TOLERANCES = {
    "fp32": dict(rtol=1.3e-6, atol=1e-5),
    "fp16": dict(rtol=1e-3, atol=1e-5),
    "bf16": dict(rtol=1.6e-2, atol=1e-5),
    "fp8e4m3": dict(rtol=0.125, atol=2.0 ** -9),
    "fp8e5m2": dict(rtol=0.25, atol=2.0 ** -16),
}

# matmul, by output dtype: inputs exact in their dtype and in [-1, 1], fp32 accumulation,
# one rounding to the output dtype. rtol covers that rounding (as above); atol covers the
# fp32 accumulation error, which grows like sqrt(K) for random signs: use matmul_tolerance.
MATMUL_TOLERANCES = {
    "fp32": dict(rtol=1e-5, atol=1e-5),
    "fp16": dict(rtol=1e-3, atol=1e-5),
    "bf16": dict(rtol=1.6e-2, atol=1e-5),
}


def matmul_tolerance(out_dtype, k):
    """assert_allclose kwargs for a matmul with inner dimension k."""
    tol = MATMUL_TOLERANCES[out_dtype]
    return dict(rtol=tol["rtol"], atol=tol["atol"] * k ** 0.5)

# cross_entropy, against torch autograd in fp32 on the same (already rounded) logits, the
# dlogits oracle then rounded once to the dtype. The kernel's exp has 1 ulp of error, and
# x - max is rounded before it (relative error |x - max| * 2^-24 in exp), so fp32 gets a
# few ulp (rtol 1e-5); losses are logsumexp sums of fp32 terms, within 1e-5 of each other.
# fp16 gradients of 1/vocab/tokens are subnormal: atol is one fp16 subnormal step (6e-8).
# Not torch's native bf16/fp16 path: it rounds the log-probabilities to the dtype before the
# backward exp, off by up to |logp| * 2^-8 relative, which is the oracle's error, not ours.
CROSS_ENTROPY_TOLERANCES = {
    "loss": dict(rtol=1e-5, atol=1e-5),
    "fp32": dict(rtol=1e-5, atol=1e-12),
    "fp16": dict(rtol=1e-3, atol=6e-8),
    "bf16": dict(rtol=1.6e-2, atol=1e-12),
}
