"""Per-dtype tolerances for comparing an op's output with a PyTorch (or numpy) oracle that
computes in fp32 and rounds once to the output dtype: torch.testing.assert_close's defaults,
about one unit in the last place of each format. Ops whose oracle accumulates differently
(reductions, matmul) add their own entries here rather than loosening these.

    np.testing.assert_allclose(got, want, **TOLERANCES["bf16"])
"""



def one_rounding(fp32=1.3e-6, fp16=1e-3, bf16=1.6e-2, atol=1e-5):
    """{dtype: assert_allclose kwargs} for fp32/fp16/bf16 outputs rounded once to the dtype: by
    default rtol is about one ulp of each format (torch.testing's defaults); a table whose fp32
    (or fp16) side has more error than that one rounding passes its own rtol."""
    return {"fp32": dict(rtol=fp32, atol=atol), "fp16": dict(rtol=fp16, atol=atol),
            "bf16": dict(rtol=bf16, atol=atol)}


TOLERANCES = {
    **one_rounding(),
    "fp8e4m3": dict(rtol=0.125, atol=2.0 ** -9),
    "fp8e5m2": dict(rtol=0.25, atol=2.0 ** -16),
}

# matmul, by output dtype: inputs exact in their dtype and in [-1, 1], fp32 accumulation,
# one rounding to the output dtype. rtol covers that rounding (as above); atol covers the
# fp32 accumulation error, which grows like sqrt(K) for random signs: use matmul_tolerance.
MATMUL_TOLERANCES = one_rounding(fp32=1e-5)


def matmul_tolerance(out_dtype, k):
    """assert_allclose kwargs for a matmul with inner dimension k."""
    tol = MATMUL_TOLERANCES[out_dtype]
    return dict(rtol=tol["rtol"], atol=tol["atol"] * k ** 0.5)

# embedding_bwd_w, d_table fp32: each row sums its tokens in token order in fp32; the oracle
# sums in fp64 from the same (already rounded) d_out. With at most a few hundred repeats of an
# id and |d_out| ~ 1, the fp32 summation error stays far below these. (embedding forward is a
# copy and is compared bit for bit.)
EMBEDDING_BWD_TOLERANCES = one_rounding(fp32=1e-5, fp16=1e-5, bf16=1e-5)

# rope / rope_bwd, by dtype: the oracle is HF's formulas in torch fp32 from the same rounded
# inputs, rounded once to the dtype. cos/sin come from glibc sincosf in the kernel and from
# torch's vectorized cos/sin in the oracle (either may be an ulp off), and x1*c - x2*s can
# cancel, so fp32 gets an absolute slack of a few ulp of |x| ~ 4; fp16/bf16 are one rounding.
ROPE_TOLERANCES = one_rounding(fp32=1e-5)

# adamw_step vs torch.optim.AdamW on CPU, after several steps. m and v follow torch's op
# order (fma in lerp and addcmul), so for fp32 grads they match bit for bit; torch's
# vectorized sqrt is not correctly rounded (about 20% of values 1 ulp off on AVX-512), so
# the denominator, and from it each update, can differ by an ulp, which leaves p within a
# couple of fp32 ulps after a few steps. bf16 params (rounded from the fp32 result each
# step) may land on the neighbouring bf16 value when the fp32 results straddle a rounding
# boundary: one bf16 ulp.
ADAMW_TOLERANCES = {
    "fp32": dict(rtol=2e-6, atol=1e-7),
    "bf16": dict(rtol=7.9e-3, atol=1e-7),
}

# Lean AdamW state (adamw_step_bf16_state, adamw_step_8bit) against the numpy replay: equal
# bits on the host; elsewhere the fp32 update may differ in the last ulps (see assert_replay),
# which can move a stochastic rounding by one bf16 step or a value across a code's midpoint to
# the next code (at most code_mismatch of the codes, each by one).
OPTIMIZER_STATE_TOLERANCES = {
    "bf16": dict(rtol=7.9e-3, atol=1e-7),
    "8bit": dict(rtol=2e-2, atol=1e-6),
}
OPTIMIZER_STATE_CODE_MISMATCH = 0.01

# grad_norm_sq: fp64 accumulation in a different order than the oracle's (numpy fp64 sum,
# or torch's fp32 norm of per-tensor norms for clip_grad_norm_).
GRAD_NORM_TOLERANCES = {
    "fp64": dict(rtol=1e-12, atol=0),
    "fp32": dict(rtol=1.2e-7, atol=0),   # one rounding of the fp64 sum
    "torch": dict(rtol=2e-6, atol=0),    # torch accumulates in fp32
}

# cross_entropy, against torch autograd in fp64 on the same (already rounded) logits, the
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

# Tensor-core attention (cuda's mma kernels, as FlashAttention and cuDNN) rounds the
# probabilities P = exp(S - m) to the 16-bit input dtype before O += P V (the mma takes 16-bit
# operands), while the row sum l keeps the fp32 P. Each rounded p~ = p (1 + d) with |d| <= u,
# the unit roundoff (2^-8 bf16, 2^-11 fp16), so for query i, with sum_j p_ij = l_i:
#   |O~_i - O_i| = |sum_j (p~_ij - p_ij) v_j| / l_i <= u sum_j p_ij |v_j| / l_i <= u max|V|
# (the running-max rescaling multiplies p and p~ alike). fp16's subnormal P (below 2^-14) is
# rounded to an absolute 2^-25 instead, at most keys * 2^-25 * max|V| over a row (l_i >= 1).
# This term adds to the output's own rounding (rtol above) when the backend rounds P.
P_ROUNDING = {"bf16": (2.0 ** -8, 0.0), "fp16": (2.0 ** -11, 2.0 ** -25)}  # (relative, subnormal absolute)


def attention_out_tolerance(dtype, max_abs_v, keys, p_rounded):
    """assert_allclose kwargs for attention's output: ATTENTION_TOLERANCES, plus the bound above
    where the implementation rounds P to dtype (p_rounded); keys is the longest row's key count."""
    tol = ATTENTION_TOLERANCES[dtype]
    rel, sub = P_ROUNDING.get(dtype, (0.0, 0.0)) if p_rounded else (0.0, 0.0)
    return dict(rtol=tol["rtol"], atol=tol["atol"] + (rel + keys * sub) * max_abs_v)

# Ops that round twice in the dtype because the Hugging Face modules they match do
# (rms_norm: to_dtype(x * rstd) before * w; swiglu: to_dtype(silu(gate)) before * up): a
# one-ulp difference in the intermediate (from an fp32 sum or exp differing in the last bit)
# can become two ulps in the result, which fp16's one-ulp rtol does not cover.
TWO_ROUNDING_TOLERANCES = one_rounding(fp16=2e-3)

# Sums over n fp32 terms in an order other than the oracle's (rms_norm's row sums, its dw
# over rows), rounded once to the dtype: rtol covers that rounding; atol, for outputs near
# zero after cancellation, grows like sqrt(n) for random signs (as matmul_tolerance).
SUM_TOLERANCES = one_rounding()


def sum_tolerance(dtype, n):
    """assert_allclose kwargs for an output that is a sum of n terms."""
    tol = SUM_TOLERANCES[dtype]
    return dict(rtol=tol["rtol"], atol=tol["atol"] * max(n, 1) ** 0.5)

# Llama (tests/models/test_llama.py) against Hugging Face LlamaForCausalLM in fp32 on the same weights.
# fp32: every op rounds once in fp32 where torch may round twice (matmul + residual add fused
# with beta = 1, dq Wq + dk Wk + dv Wv summed in one matmul accumulation), and sums run in a
# different order (oneDNN vs MKL blocking, attention's online softmax): errors of a few fp32
# ulps per op that grow through the layers. Measured on the test configs: logits within
# 2e-7 of |logits| ~ 0.5, loss within 1e-6 relative, gradients within 1e-6 of each tensor's
# largest |gradient|. Gradients are compared per tensor with atol = grad_atol * max|want|,
# since a tensor's small entries carry the absolute error of its large ones.
# bf16: our model runs in bf16 (weights, activations and activation gradients, fp32
# accumulation and fp32 weight gradients), the oracle is HF in fp32 from the same
# bf16-rounded weights, so the difference is bf16 rounding of every activation (2^-9
# relative each) compounded through the layers: compared as relative Frobenius error
# ||got - want|| / ||want|| (logits, every gradient) and relative loss error.
# AdamW over 5 steps: the per-step losses follow the fp32 forward tolerance; parameters after
# 5 steps as TRAINED_WEIGHTS_RTOL (below).
# Packed vs separate documents, accumulation vs one batch: same ops on the same values with
# sums split differently (fp32): grad_atol of each tensor's largest |gradient|.
# Llama logits of a KV-cached forward (attention_kv over the cache, a 1-row lm_head matmul)
# against the full forward's logits at the same positions.
LLAMA_CACHED_TOLERANCES = {
    "fp32": dict(rtol=1e-4, atol=1e-5),
    "bf16": dict(rtol=2e-2, atol=2e-2),
}

LLAMA_TOLERANCES = {
    "fp32": dict(logits_rtol=1e-4, logits_atol=1e-5, loss_rtol=1e-5, grad_rtol=1e-4, grad_atol=1e-5),
    "bf16": dict(logits_rel=1.5e-2, loss_rel=2e-3, grad_rel=3e-2),  # measured 4e-3, 4e-6, 8e-3,
    "adamw": dict(loss_rtol=1e-5),
    "same_math": dict(rtol=1e-4, atol=1e-6, grad_atol=1e-5),
}


# Weights after AdamW from two runs whose fp32 sums run in different orders (ring vs resident
# on split sequences, ranks vs one process, chunks vs whole documents, us vs torch). AdamW
# moves each element by lr * m / (sqrt(v) + eps) a step, about lr whatever the gradient's size:
# an element's relative gradient error becomes the same relative error of its step, and that
# is large (up to 2 lr) for the elements whose gradient is within the sums' rounding noise of
# zero (or of eps). Which elements those are depends on the order, so on the CPU (oneDNN's
# AVX-512, AVX2 and SSE4.1 kernels block their sums differently): an elementwise tolerance on
# the weights, or one relative to a tensor's own size or update, passes on one CPU and fails on
# another (a 32-element norm weight with one such element; lr 1e-2 on weights of 0.02). So the
# difference is bounded per tensor by the scale of what training did, lr per element per step,
# in RMS over the tensor:
#   ||got - want|| / sqrt(numel) <= rtol * lr * steps
# fp32: rtol 1e-3, the two runs' steps equal to 0.1% of lr on average (measured on the tests'
# models and steps with oneDNN's AVX-512, AVX2 and SSE4.1 kernels and the fallback matmul:
# at most 1.1e-4, a 32-element norm weight of the ring over a K/V context with AVX2 kernels).
# bf16 weights are a rounding of the fp32 master after every step, so one bf16 ulp (at most
# 2^-7 relative) can separate two runs whatever the step: they are bounded by
# ||got - want|| <= 2^-7 * ||want|| (lr=None; measured at most 1.6e-3). Runs whose sums run in the same order by
# construction (tracing on/off, resume, the same chunks, a clipping scale that differs in its
# last bit, which m / sqrt(v) cancels) stay compared bit for bit or elementwise.
TRAINED_WEIGHTS_RTOL = {"fp32": 1e-3, "bf16": 2.0 ** -7}


def assert_trained_weights_close(got, want, rtol, lr=None, steps=1, err_msg=""):
    """got, want: {tensor name: array}. Per tensor ||got - want|| <= rtol * lr * steps * sqrt(numel),
    or rtol * ||want|| when lr is None; see TRAINED_WEIGHTS_RTOL."""
    import numpy as np
    assert set(got) == set(want), f"{err_msg}tensors differ: {sorted(set(got) ^ set(want))}"
    for name, w in want.items():
        w = np.asarray(w, np.float64)
        diff = np.linalg.norm(np.asarray(got[name], np.float64) - w)
        scale = np.linalg.norm(w) if lr is None else lr * steps * w.size ** 0.5
        assert diff <= rtol * scale, (f"{err_msg}{name}: ||got - want|| = {diff:.3g} > {rtol:.3g} * "
                                      f"{'||want||' if lr is None else 'lr * steps * sqrt(numel)'} ({scale:.3g})")


def assert_replay(h, got, want, tol, err_msg=""):
    """got against a numpy replay of the host kernels' fp32 operation order: bit for bit on the
    host backend; on the others, which follow the same order but whose division, sqrt, exp and
    fma may round differently (Vulkan allows 2.5 ulp for a division; lavapipe does not fuse
    fma), within tol (NaN matching NaN)."""
    import numpy as np
    if h.backend == "host":
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
    else:
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=err_msg, **tol)
