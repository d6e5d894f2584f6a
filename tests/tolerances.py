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

# attention (forward and backward), by dtype; inputs exact in the dtype, oracle torch SDPA in
# fp32 on the same values. out: one rounding to the dtype (rtol as TOLERANCES) plus fp32
# summation-order noise over a few hundred keys (atol). lse is fp32 for every dtype: scores
# and sums in fp32 in a different order than torch, about 1e-6 at |lse| < 10.
# Gradients: atol is a fraction of the largest |gradient| of the array (grad_atol * max|want|).
# The kernel forms D = rowsum(dO * O) from O as stored in the dtype, as FlashAttention does,
# while autograd uses the fp32 O; that shifts every ds_ij = p_ij (dp_ij - D_i) by about one
# ulp of the dtype times |dO||O|, which dq and dk collect over the keys (measured: 0.5% of
# max|dq| in bf16, 0.05% in fp16; fp32 about 1e-6).
ATTENTION_TOLERANCES = {
    "fp32": dict(rtol=1e-4, atol=1e-5, lse_atol=2e-5, grad_rtol=1e-4, grad_atol=2e-5),
    "fp16": dict(rtol=1e-3, atol=1e-5, lse_atol=2e-5, grad_rtol=1e-3, grad_atol=2e-3),
    "bf16": dict(rtol=1.6e-2, atol=1e-5, lse_atol=2e-5, grad_rtol=1.6e-2, grad_atol=1e-2),
}
