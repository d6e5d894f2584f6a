"""adamw_step_bf16_state and adamw_step_8bit against the numpy replay of the same algorithm
(optimizer_state_reference.py): bit for bit on the host backend (every SIMD path: see
test_determinism), within tolerances on the others (tolerances.py, OPTIMIZER_STATE_TOLERANCES);
and the lean state tracks fp32 AdamW (torch's trajectory) within what its precision allows."""
import numpy as np
import pytest

import dataflow as df
import optimizer_state_reference as ref
from conftest import handle_fixture
from tolerances import OPTIMIZER_STATE_CODE_MISMATCH, OPTIMIZER_STATE_TOLERANCES

SIZES = (1, 7, 255, 257, 1000, 20_011)
HYPER = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
STEPS = 4
OPS = ("adamw_step", "adamw_step_bf16_state", "adamw_step_8bit")
h = handle_fixture("h", OPS, streams=2, device_memory="256MiB")


def start(n, seed, param_dtype):
    rng = np.random.default_rng(seed)
    p0 = rng.standard_normal(n).astype(np.float32)
    p0 = ref.to_bf16(p0) if param_dtype == "bf16" else p0
    gs = [rng.standard_normal(n).astype(np.float32) * np.float32(10.0 ** rng.integers(-3, 1)) for _ in range(STEPS)]
    return p0, gs


def grad_values(g, dtype):
    return ref.to_bf16(g) if dtype == "bf16" else g


def check(h, got, want, tol, what):
    if h.backend == "host":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, err_msg=what, **tol)


@pytest.mark.parametrize("param_dtype,grad_dtype,master", [("fp32", "fp32", False), ("fp32", "bf16", False),
                                                           ("bf16", "fp32", True), ("bf16", "bf16", False)])
@pytest.mark.parametrize("n", SIZES)
def test_bf16_state_equals_reference(h, n, param_dtype, grad_dtype, master):
    p0, gs = start(n, n, param_dtype)
    seed = 0x1234_5678_9abc_def0 + n
    param, g = h.from_numpy(p0, dtype=param_dtype), h.empty((n,), grad_dtype)
    m, v = h.zeros((n,), "bf16"), h.zeros((n,), "bf16")
    mst = h.from_numpy(p0) if master else None
    want = dict(p=p0, m=np.zeros(n, np.float32), v=np.zeros(n, np.float32), master=p0 if master else None)
    for t, gn in enumerate(gs, 1):
        g.copy_from_numpy(gn)
        df.ops.adamw_step_bf16_state(h, param, g, m, v, t, seed=seed, master=mst, **HYPER)
        p1, m1, v1, w1 = ref.adamw_bf16_state(want["p"], grad_values(gn, grad_dtype), want["m"], want["v"], t, seed,
                                              HYPER, master=want["master"], param_dtype=param_dtype)
        want = dict(p=p1, m=m1, v=v1, master=w1)
    tol = OPTIMIZER_STATE_TOLERANCES["bf16"]
    check(h, m.numpy(), want["m"], tol, "m")
    check(h, v.numpy(), want["v"], tol, "v")
    check(h, param.numpy(), want["p"], tol, "param")
    if master:
        check(h, mst.numpy(), want["master"], tol, "master")


def test_bf16_state_rounds_stochastically_and_reproducibly(h):
    """The same seed gives the same bits; another seed other bits; the rounding is unbiased:
    a value a third of a bf16 step above a bf16 number rounds up about a third of the time."""
    n = 200_000
    runs = {}
    for seed in (7, 7, 8):
        m = h.from_numpy(np.zeros(n, np.float32), dtype="bf16")
        v = h.zeros((n,), "bf16")
        # lr 0 and beta1 = 0.5: m = lerp(0, g, 0.5) = g / 2, p unchanged
        g = np.full(n, 2 * (1.0 + 2.0 ** -7 / 3), np.float32)
        df.ops.adamw_step_bf16_state(h, h.from_numpy(np.ones(n, np.float32)), h.from_numpy(g), m, v, 1, seed=seed,
                                     lr=0.0, betas=(0.5, 0.999), eps=1e-8, weight_decay=0.0)
        runs.setdefault(seed, []).append(m.numpy())
    np.testing.assert_array_equal(runs[7][0], runs[7][1])
    assert np.any(runs[7][0] != runs[8][0])
    up = np.mean(runs[7][0] > 1.0)
    assert set(np.unique(runs[7][0])) == {np.float32(1.0), np.float32(1.0 + 2.0 ** -7)}
    assert abs(up - 1 / 3) < 0.01, up


def test_bf16_state_seed_is_checked(h):
    x = h.zeros((4,))
    m, v = h.zeros((4,), "bf16"), h.zeros((4,), "bf16")
    with pytest.raises(df.BadArgumentError, match="seed"):
        df.ops.adamw_step_bf16_state(h, x, h.zeros((4,)), m, v, 1, seed=-1)
    with pytest.raises(df.BadArgumentError, match="m must be bf16"):
        df.ops.adamw_step_bf16_state(h, x, h.zeros((4,)), h.zeros((4,)), v, 1)


def test_dynamic_code_matches_reference():
    for signed in (True, False):
        code = df.ops.adamw_8bit_dynamic_code(signed)
        np.testing.assert_array_equal(code, ref.dynamic_code(signed))
        assert code.size == 256 and np.all(np.diff(code) > 0) and code[-1] == 1.0
        assert (code[0] < -0.99) if signed else (code[0] == 0.0)


def qmaps(h):
    return (h.from_numpy(df.ops.adamw_8bit_dynamic_code(True)), h.from_numpy(df.ops.adamw_8bit_dynamic_code(False)))


@pytest.mark.parametrize("param_dtype,grad_dtype,master", [("fp32", "fp32", False), ("fp32", "bf16", False),
                                                           ("bf16", "fp32", True), ("bf16", "bf16", False)])
@pytest.mark.parametrize("n", SIZES)
def test_8bit_state_equals_reference(h, n, param_dtype, grad_dtype, master):
    p0, gs = start(n, n + 1, param_dtype)
    blocks = -(-n // ref.BLOCK)
    qm, qv = qmaps(h)
    param, g = h.from_numpy(p0, dtype=param_dtype), h.empty((n,), grad_dtype)
    m, v = h.zeros((n,), "uint8"), h.zeros((n,), "uint8")
    ma, va = h.zeros((blocks,)), h.zeros((blocks,))
    mst = h.from_numpy(p0) if master else None
    qm_np, qv_np = qm.numpy(), qv.numpy()
    want = (p0, np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(blocks, np.float32),
            np.zeros(blocks, np.float32), p0 if master else None)
    for t, gn in enumerate(gs, 1):
        g.copy_from_numpy(gn)
        df.ops.adamw_step_8bit(h, param, g, m, v, ma, va, qm, qv, t, master=mst, **HYPER)
        p, mc, vc, mab, vab, w = want
        want = ref.adamw_8bit(p, grad_values(gn, grad_dtype), mc, vc, mab, vab, qm_np, qv_np, t, HYPER, master=w,
                              param_dtype=param_dtype)
    p, mc, vc, mab, vab, w = want
    tol = OPTIMIZER_STATE_TOLERANCES["8bit"]
    check(h, ma.numpy(), mab, tol, "m_absmax")
    check(h, va.numpy(), vab, tol, "v_absmax")
    check(h, param.numpy(), p, tol, "param")
    if h.backend == "host":
        np.testing.assert_array_equal(m.numpy(), mc)
        np.testing.assert_array_equal(v.numpy(), vc)
    else:  # a last-ulp difference may move a value across a midpoint: to the next code
        for got, code in ((m.numpy(), mc), (v.numpy(), vc)):
            diff = np.abs(got.astype(int) - code.astype(int))
            assert diff.max() <= 1 and np.mean(diff) <= OPTIMIZER_STATE_CODE_MISMATCH


def test_8bit_state_tracks_fp32_adamw(h):
    """Dequantized 8-bit m and v stay within their code's resolution of the fp32 state, and the
    parameters within a small fraction of the distance they moved (the paper's claim, on a
    noisy quadratic here)."""
    n = 4096
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(n).astype(np.float32)
    qm, qv = qmaps(h)
    p8, p32 = h.from_numpy(p0), h.from_numpy(p0)
    m8, v8 = h.zeros((n,), "uint8"), h.zeros((n,), "uint8")
    ma, va = h.zeros((n // 256,)), h.zeros((n // 256,))
    m32, v32 = h.zeros((n,)), h.zeros((n,))
    hyper = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    for t in range(1, 101):
        noise = rng.standard_normal(n).astype(np.float32) * np.float32(0.1)
        df.ops.adamw_step_8bit(h, p8, h.from_numpy(p8.numpy() + noise), m8, v8, ma, va, qm, qv, t, **hyper)
        df.ops.adamw_step(h, p32, h.from_numpy(p32.numpy() + noise), m32, v32, t, **hyper)
    moved = np.linalg.norm(p32.numpy() - p0)
    assert moved > 1.0
    assert np.linalg.norm(p8.numpy() - p32.numpy()) < 0.05 * moved  # measured: 0.034
    m_deq = ref.dequantize(m8.numpy(), ma.numpy(), qm.numpy())
    assert np.linalg.norm(m_deq - m32.numpy()) < 0.05 * np.linalg.norm(m32.numpy())


def test_8bit_state_arguments_are_checked(h):
    qm, qv = qmaps(h)
    n = 300
    p, g = h.zeros((n,)), h.zeros((n,))
    m, v = h.zeros((n,), "uint8"), h.zeros((n,), "uint8")
    with pytest.raises(df.BadArgumentError,
                       match=r"adamw_step_8bit: m_absmax must have shape \[cdiv\(n, 256\)\] = \(2,\), got \(1,\)"):
        df.ops.adamw_step_8bit(h, p, g, m, v, h.zeros((1,)), h.zeros((2,)), qm, qv, 1)
    with pytest.raises(df.BadArgumentError,
                       match=r"adamw_step_8bit: qmap_v must have shape \[256\] = \(256,\), got \(255,\)"):
        df.ops.adamw_step_8bit(h, p, g, m, v, h.zeros((2,)), h.zeros((2,)), qm, h.zeros((255,)), 1)
    with pytest.raises(df.DataflowError, match="step"):
        df.ops.adamw_step_8bit(h, p, g, m, v, h.zeros((2,)), h.zeros((2,)), qm, qv, 0)


def _run_all(handle, n=300_007):
    """test_determinism: both storages, every param/grad dtype, 2 steps; the raw bits."""
    rng = np.random.default_rng(12)
    p0 = rng.standard_normal(n).astype(np.float32)
    gs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    qm, qv = qmaps(handle)
    blocks = -(-n // ref.BLOCK)
    outs = []
    for pd in ("fp32", "bf16"):
        for gd in ("fp32", "bf16"):
            param, g = handle.from_numpy(p0, dtype=pd), handle.empty((n,), gd)
            param8 = handle.from_numpy(p0, dtype=pd)
            m, v = handle.zeros((n,), "bf16"), handle.zeros((n,), "bf16")
            m8, v8 = handle.zeros((n,), "uint8"), handle.zeros((n,), "uint8")
            ma, va = handle.zeros((blocks,)), handle.zeros((blocks,))
            for t, gn in enumerate(gs, 1):
                g.copy_from_numpy(gn)
                df.ops.adamw_step_bf16_state(handle, param, g, m, v, t, seed=99, **HYPER)
                df.ops.adamw_step_8bit(handle, param8, g, m8, v8, ma, va, qm, qv, t, **HYPER)
            outs += [param.raw(), m.raw(), v.raw(), param8.raw(), m8.raw(), v8.raw(), ma.raw(), va.raw()]
    return outs
