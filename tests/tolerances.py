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

# embedding_bwd_w, d_table fp32: each row sums its tokens in token order in fp32; the oracle
# sums in fp64 from the same (already rounded) d_out. With at most a few hundred repeats of an
# id and |d_out| ~ 1, the fp32 summation error stays far below these. (embedding forward is a
# copy and is compared bit for bit.)
EMBEDDING_BWD_TOLERANCES = {
    "fp32": dict(rtol=1e-5, atol=1e-5),
    "fp16": dict(rtol=1e-5, atol=1e-5),
    "bf16": dict(rtol=1e-5, atol=1e-5),
}

# rope / rope_bwd, by dtype: the oracle is HF's formulas in torch fp32 from the same rounded
# inputs, rounded once to the dtype. cos/sin come from glibc sincosf in the kernel and from
# torch's vectorized cos/sin in the oracle (either may be an ulp off), and x1*c - x2*s can
# cancel, so fp32 gets an absolute slack of a few ulp of |x| ~ 4; fp16/bf16 are one rounding.
ROPE_TOLERANCES = {
    "fp32": dict(rtol=1e-5, atol=1e-5),
    "fp16": dict(rtol=1e-3, atol=1e-5),
    "bf16": dict(rtol=1.6e-2, atol=1e-5),
}
