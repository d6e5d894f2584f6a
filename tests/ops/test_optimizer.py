"""adamw_step, grad_norm_sq and clip_by_global_norm against torch.optim.AdamW and
torch.nn.utils.clip_grad_norm_ (CPU, fp32), over several steps and odd sizes.

The torch oracle for bf16 parameters is torch doing the same step in fp32 and rounding the
result to bf16: with a master copy the fp32 trajectory is torch's, without one each step
starts from the rounded bf16 value. Tolerances are in tolerances.py."""

import ml_dtypes
import numpy as np
import pytest
import torch

import dataflow as df
from tolerances import ADAMW_TOLERANCES, GRAD_NORM_TOLERANCES, assert_replay
from conftest import handle_fixture

SIZES = (1, 7, 1000, 100003)
HYPER = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
STEPS = 5


OPS = ("adamw_step", "grad_norm_sq_partials", "grad_norm_sq_reduce", "clip_by_global_norm")
h = handle_fixture("h", OPS, streams=2, device_memory="512MiB")


def rounded(x, dtype):
    """x as the float32 values a device array of dtype holds."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32) if dtype == "bf16" else x


def grads(n, steps, seed, dtype):
    rng = np.random.default_rng(seed)
    return [rounded(rng.standard_normal(n).astype(np.float32) * 0.1, dtype) for _ in range(steps)]


def torch_adamw(p0, gs, round_each_step=False, clip=None):
    """torch.optim.AdamW (CPU default implementation) from p0 over gradients gs; returns the
    fp32 params, m and v after the last step."""
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([p], lr=HYPER["lr"], betas=HYPER["betas"], eps=HYPER["eps"],
                            weight_decay=HYPER["weight_decay"])
    for g in gs:
        p.grad = torch.from_numpy(g.copy())
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([p], clip)
        opt.step()
        if round_each_step:
            with torch.no_grad():
                p.copy_(p.bfloat16().float())
    st = opt.state[p]
    return p.detach().numpy(), st["exp_avg"].numpy(), st["exp_avg_sq"].numpy()


def run_adamw(h, p0, gs, param_dtype, grad_dtype, master=False, scale=None):
    param = h.from_numpy(p0, dtype=param_dtype)
    m, v = h.zeros(p0.shape), h.zeros(p0.shape)
    mst = h.from_numpy(p0) if master else None
    g = h.empty(p0.shape, grad_dtype)
    for t, gn in enumerate(gs, 1):
        g.copy_from_numpy(gn)
        df.ops.adamw_step(h, param, g, m, v, t, master=mst, scale=scale, **HYPER)
    return param, m, v, mst


@pytest.mark.parametrize("grad_dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_adamw_fp32(h, n, grad_dtype):
    p0 = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    gs = grads(n, STEPS, n + 1, grad_dtype)
    param, m, v, _ = run_adamw(h, p0, gs, "fp32", grad_dtype)
    want_p, want_m, want_v = torch_adamw(p0, gs)
    # m and v do not depend on p, and follow torch's fma order: identical bits on host (within
    # fp32 tolerance where the device's fma is not fused: lavapipe)
    assert_replay(h, m.numpy(), want_m, ADAMW_TOLERANCES["fp32"])
    assert_replay(h, v.numpy(), want_v, ADAMW_TOLERANCES["fp32"])
    np.testing.assert_allclose(param.numpy(), want_p, **ADAMW_TOLERANCES["fp32"])
    assert not np.allclose(param.numpy(), p0, rtol=1e-4, atol=0), "the parameters moved"


@pytest.mark.parametrize("grad_dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_adamw_bf16_master(h, n, grad_dtype):
    p0 = rounded(np.random.default_rng(n).standard_normal(n).astype(np.float32), "bf16")
    gs = grads(n, STEPS, n + 2, grad_dtype)
    param, m, v, master = run_adamw(h, p0, gs, "bf16", grad_dtype, master=True)
    want_p, want_m, _ = torch_adamw(p0, gs)
    np.testing.assert_allclose(master.numpy(), want_p, **ADAMW_TOLERANCES["fp32"])
    assert_replay(h, m.numpy(), want_m, ADAMW_TOLERANCES["fp32"])
    # the bf16 param is exactly the master rounded; the master is torch's within fp32 ulps
    np.testing.assert_array_equal(param.numpy(), rounded(master.numpy(), "bf16"))
    np.testing.assert_allclose(param.numpy(), rounded(want_p, "bf16"), **ADAMW_TOLERANCES["bf16"])


@pytest.mark.parametrize("grad_dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_adamw_bf16_no_master(h, n, grad_dtype):
    p0 = rounded(np.random.default_rng(n).standard_normal(n).astype(np.float32), "bf16")
    gs = grads(n, STEPS, n + 3, grad_dtype)
    param, _, _, _ = run_adamw(h, p0, gs, "bf16", grad_dtype)
    want_p, _, _ = torch_adamw(p0, gs, round_each_step=True)
    np.testing.assert_allclose(param.numpy(), want_p, **ADAMW_TOLERANCES["bf16"])


def test_adamw_zero_weight_decay_and_large_beta1_lerp(h):
    """beta1 <= 0.5 takes torch's other lerp branch; weight_decay 0 leaves p unscaled."""
    n = 1000
    p0 = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    gs = grads(n, 3, 6, "fp32")
    param, m, v = h.from_numpy(p0), h.zeros(n), h.zeros(n)
    g = h.empty(n)
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = torch.optim.AdamW([tp], lr=0.1, betas=(0.3, 0.9), eps=1e-6, weight_decay=0.0)
    for t, gn in enumerate(gs, 1):
        g.copy_from_numpy(gn)
        df.ops.adamw_step(h, param, g, m, v, t, lr=0.1, betas=(0.3, 0.9), eps=1e-6, weight_decay=0.0)
        tp.grad = torch.from_numpy(gn.copy())
        opt.step()
    assert_replay(h, m.numpy(), opt.state[tp]["exp_avg"].numpy(), ADAMW_TOLERANCES["fp32"])
    np.testing.assert_allclose(param.numpy(), tp.detach().numpy(), **ADAMW_TOLERANCES["fp32"])


# ---- grad_norm_sq ----

@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("out_dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("n", SIZES + (8192, 8193))
def test_grad_norm_sq(h, n, dtype, out_dtype):
    x = rounded(np.random.default_rng(n).standard_normal(n).astype(np.float32) * 3, dtype)
    out = df.ops.grad_norm_sq(h, h.from_numpy(x, dtype=dtype), out_dtype=out_dtype)
    assert out.dtype == out_dtype
    want = np.sum(x.astype(np.float64) ** 2)
    np.testing.assert_allclose(out.numpy()[0], want, **GRAD_NORM_TOLERANCES[out_dtype])


@pytest.mark.parametrize("out_dtype", ["fp32", "fp64"])
def test_grad_norm_sq_accumulates_and_clips_like_torch(h, out_dtype):
    """Global norm over several tensors (one submit each, accumulate after the first), then
    the clip scale applied as torch's clip_grad_norm_ applies it."""
    rng = np.random.default_rng(7)
    gs = [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 1000, 100003)]
    sumsq = h.empty(1, out_dtype)
    for i, g in enumerate(gs):
        df.ops.grad_norm_sq(h, h.from_numpy(g), out=sumsq, accumulate=i > 0)
    want_sumsq = sum(np.sum(g.astype(np.float64) ** 2) for g in gs)
    np.testing.assert_allclose(sumsq.numpy()[0], want_sumsq, **GRAD_NORM_TOLERANCES[out_dtype])

    for max_norm in (1.0, 1e4):
        tgs = [torch.nn.Parameter(torch.zeros(g.size)) for g in gs]
        for p, g in zip(tgs, gs):
            p.grad = torch.from_numpy(g.copy())
        total = torch.nn.utils.clip_grad_norm_(tgs, max_norm)
        scale, norm = df.ops.clip_by_global_norm(h, sumsq, max_norm)
        np.testing.assert_allclose(norm.numpy()[0], total.item(), **GRAD_NORM_TOLERANCES["torch"])
        s = scale.numpy()[0]
        assert s == (1.0 if max_norm > 1e3 else pytest.approx(max_norm / total.item(), rel=2e-6))
        for p, g in zip(tgs, gs):
            np.testing.assert_allclose(g * s, p.grad.numpy(), rtol=2e-6, atol=0)


def test_clip_scale_feeds_adamw(h):
    """adamw_step reading clip_by_global_norm's device scale matches torch clipping then stepping."""
    n = 1000
    p0 = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    gs = [g * 10 for g in grads(n, 3, 9, "fp32")]
    param, m, v = h.from_numpy(p0), h.zeros(n), h.zeros(n)
    g, sumsq = h.empty(n), h.empty(1)
    for t, gn in enumerate(gs, 1):
        g.copy_from_numpy(gn)
        df.ops.grad_norm_sq(h, g, out=sumsq)
        scale, _ = df.ops.clip_by_global_norm(h, sumsq, 0.5)
        df.ops.adamw_step(h, param, g, m, v, t, scale=scale, **HYPER)
    want_p, want_m, _ = torch_adamw(p0, gs, clip=0.5)
    np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(param.numpy(), want_p, **ADAMW_TOLERANCES["fp32"])


def test_clip_nonfinite_norm_gives_nan_scale(h):
    """torch's clamp keeps NaN, so a NaN/Inf gradient poisons the step instead of vanishing."""
    x = h.from_numpy(np.array([1.0, np.inf, 2.0], np.float32))
    scale, norm = df.ops.clip_by_global_norm(h, df.ops.grad_norm_sq(h, x), 1.0)
    assert np.isinf(norm.numpy()[0]) and scale.numpy()[0] == 0.0
    x = h.from_numpy(np.array([1.0, np.nan], np.float32))
    scale, _ = df.ops.clip_by_global_norm(h, df.ops.grad_norm_sq(h, x), 1.0)
    assert np.isnan(scale.numpy()[0])


# ---- determinism: _run_all is what test_determinism.py compares across threads and SIMD paths ----

def _run_all(handle, n=300_007):
    rng = np.random.default_rng(11)
    p0 = rng.standard_normal(n).astype(np.float32)
    gs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    outs = []
    for pd in ("fp32", "bf16"):
        for gd in ("fp32", "bf16"):
            for master in ([False, True] if pd == "bf16" else [False]):
                param, m, v, mst = run_adamw(handle, p0, gs, pd, gd, master=master)
                outs += [param.raw(), m.raw(), v.raw()] + ([mst.raw()] if master else [])
        for od in ("fp32", "fp64"):
            x = handle.from_numpy(p0, dtype=pd)
            out = df.ops.grad_norm_sq(handle, x, out_dtype=od)
            df.ops.grad_norm_sq(handle, x, out=out, accumulate=True)
            outs.append(out.raw())
    return outs


# ---- bad input ----

@pytest.fixture
def opt(h):
    n = 64
    return dict(param=h.zeros(n), grad=h.zeros(n), m=h.zeros(n), v=h.zeros(n))


@pytest.mark.parametrize("kw,match", [
    (dict(lr=-1e-3), r"adamw_step: lr must be >= 0, got -0.001"),
    (dict(lr=float("nan")), r"adamw_step: lr must be >= 0, got nan"),
    (dict(lr=float("inf")), r"adamw_step: requires finite\(lr\), got lr = inf"),
    (dict(betas=(1.0, 0.999)), r"adamw_step: beta1 must be < 1, got 1"),
    (dict(betas=(0.9, -0.5)), r"adamw_step: beta2 must be >= 0, got -0.5"),
    (dict(eps=-1.0), r"adamw_step: eps must be >= 0, got -1"),
    (dict(weight_decay=float("inf")), r"adamw_step: requires finite\(weight_decay\), got weight_decay = inf"),
])
def test_adamw_bad_scalars(h, opt, kw, match):
    with pytest.raises(df.BadArgumentError, match=match):
        df.ops.adamw_step(h, opt["param"], opt["grad"], opt["m"], opt["v"], 1, **kw)


def test_adamw_bad_tensors(h, opt):
    p, g, m, v = opt["param"], opt["grad"], opt["m"], opt["v"]
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: step must be > 0, got 0"):
        df.ops.adamw_step(h, p, g, m, v, 0)
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: param dtype must be one of \{fp32, bf16\}, got fp16"):
        df.ops.adamw_step(h, h.zeros(64, "fp16"), h.zeros(64, "fp16"), m, v, 1)
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: m must be fp32, got bf16"):
        df.ops.adamw_step(h, p, g, h.zeros(64, "bf16"), v, 1)
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: v must have shape \[n\] with n = 64 \(from param\), got \(63,\)"):
        df.ops.adamw_step(h, p, g, m, h.zeros(63), 1)
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: requires !present\(master\) \|\| dtype\(param\) == bf16, "
                                                   r"got dtype\(param\) = fp32, master = given"):
        df.ops.adamw_step(h, p, g, m, v, 1, master=h.zeros(64))
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: scale must have shape \[1\] = \(1,\), got \(2,\)"):
        df.ops.adamw_step(h, p, g, m, v, 1, scale=h.zeros(2))
    np.testing.assert_array_equal(p.numpy(), 0)  # nothing ran


def test_c_level_checks(h, opt):
    """The C submit functions check what the Python layer would have caught."""
    from dataflow._ffi import ffi, opslib
    from dataflow.errors import check
    p, g, m, v = opt["param"], opt["grad"], opt["m"], opt["v"]
    with pytest.raises(df.BadArgumentError, match=r"adamw_step: param \(65 fp32 elements = n\).*past the end"):
        check(opslib.dataflow_submit_adamw_step(h._ptr(), 0, 1, 1, 65, p.cdata, g.cdata, m.cdata, v.cdata,
                                                ffi.NULL, ffi.NULL, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1))
    with pytest.raises(df.BadArgumentError, match="adamw_step: grad is NULL"):
        check(opslib.dataflow_submit_adamw_step(h._ptr(), 0, 1, 1, 64, p.cdata, ffi.NULL, m.cdata, v.cdata,
                                                ffi.NULL, ffi.NULL, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1))
    n = 64 * 8192 + 1  # 65 blocks; the arena rounds small allocations up, so make it clearly short
    ws, x, out = h.empty(1, "fp64"), h.zeros(n), h.zeros(1)
    with pytest.raises(df.BadArgumentError, match=r"grad_norm_sq_partials: workspace \(65 fp64 elements = cdiv\(n, 8192\)\)"
                                                   r".*past the end"):
        check(opslib.dataflow_submit_grad_norm_sq(h._ptr(), 0, 1, 1, n, x.cdata, ws.cdata, out.cdata, 0))
    with pytest.raises(df.BadArgumentError, match=r"grad_norm_sq_reduce: out dtype must be one of \{fp32, fp64\}, "
                                                   r"got bf16"):
        df.ops.grad_norm_sq(h, p, out=h.zeros(1, "bf16"))


def test_grad_norm_and_clip_bad_input(h, opt):
    with pytest.raises(df.BadArgumentError, match=r"grad_norm_sq_partials: x dtype must be one of \{fp32, bf16\}, "
                                                   r"got fp16"):
        df.ops.grad_norm_sq(h, h.zeros(8, "fp16"))
    with pytest.raises(df.BadArgumentError, match="accumulate=True needs out"):
        df.ops.grad_norm_sq(h, opt["grad"], accumulate=True)
    with pytest.raises(df.BadArgumentError, match=r"workspace must hold 8 bytes, got 4"):
        df.ops.grad_norm_sq(h, opt["grad"], workspace=h.zeros(1, "fp32"))
    s = h.zeros(1)
    for bad, match in ((0.0, "max_norm must be > 0, got 0"), (-1.0, "max_norm must be > 0, got -1"),
                       (float("nan"), "max_norm must be > 0, got nan"),
                       (float("inf"), r"requires finite\(max_norm\), got max_norm = inf")):
        with pytest.raises(df.BadArgumentError, match="clip_by_global_norm: " + match):
            df.ops.clip_by_global_norm(h, s, bad)
    with pytest.raises(df.BadArgumentError, match=r"sumsq dtype must be one of \{fp32, fp64\}, got bf16"):
        df.ops.clip_by_global_norm(h, h.zeros(1, "bf16"), 1.0)
