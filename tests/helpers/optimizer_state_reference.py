"""numpy replay of the AdamW state-storage kernels (adamw_step_bf16_state, adamw_step_8bit):
the same fp32 operations in the same order as backends/host/kernels/adamw_update.h, the
stochastic rounding's counter-based hash and the blockwise 8-bit code, written from the
catalogue's contract (libdataflowops/catalogue.toml), so the host kernels must equal it bit
for bit."""
import numpy as np

f32, u32 = np.float32, np.uint32
BLOCK = 256


def fma(a, b, c):
    """fmaf of float32 arrays: the product is exact in float64; the sum rounds twice, which
    differs from one rounding only when float64 lands exactly halfway between two floats
    (odds about 2^-29 per element; the data here are fixed)."""
    return (np.asarray(a, np.float64) * b + c).astype(f32)


def constants(lr, betas, eps, weight_decay, step):
    beta1, beta2 = betas
    bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    w1 = f32(1.0 - beta1)
    small = abs(w1) < 0.5
    return dict(decay=f32(1.0 - lr * weight_decay), w=w1 if small else w1 - f32(1.0), small=small, beta2=f32(beta2),
                c2=f32(1.0 - beta2), nss=f32(-(lr / bc1)), bc2s=f32(np.sqrt(bc2)), eps=f32(eps))


def update(c, g, p, m, v, scale=None):
    """One fp32 AdamW update (arrays of float32): returns new p, m, v."""
    if scale is not None and scale != f32(1.0):
        g = g * f32(scale)
    x = p * c["decay"]
    m = fma(c["w"], g - m, m if c["small"] else g)
    v = fma(c["c2"] * g, g, v * c["beta2"])
    return x + (c["nss"] * m) / (np.sqrt(v) / c["bc2s"] + c["eps"]), m, v


def mix(x):
    """lowbias32 on uint32 arrays (wrapping)."""
    x = np.asarray(x, u32).copy()
    x ^= x >> u32(16)
    x *= u32(0x7feb352d)
    x ^= x >> u32(15)
    x *= u32(0x846ca68b)
    x ^= x >> u32(16)
    return x


def sr_keys(seed, step):
    lo, hi = lambda x: u32(x & 0xffffffff), lambda x: u32(x >> 32)  # noqa: E731
    key = mix(lo(seed) ^ mix(hi(seed) ^ mix(lo(step) ^ mix(hi(step)))))
    return mix(key ^ u32(1)), mix(key ^ u32(2))


def sr_round(x, key, index):
    """x (float32) rounded to bf16 by the word of (key, element index); returns float32."""
    index = np.asarray(index, np.uint64)
    r = mix(mix((index & np.uint64(0xffffffff)).astype(u32) ^ key) + (index >> np.uint64(32)).astype(u32))
    bits = ((x.view(u32) + (r & u32(0xffff))) & u32(0xffff0000)).view(f32)
    nan = np.isnan(x)
    bits[nan] = x[nan]
    return bits


def to_bf16(x):
    import ml_dtypes
    return np.asarray(x, f32).astype(ml_dtypes.bfloat16).astype(f32)


def adamw_bf16_state(p, g, m, v, step, seed, hyper, master=None, param_dtype="fp32", scale=None):
    """One step; p, g, m, v (m, v as float32 holding bf16 values), master as float32 arrays.
    Returns param, m, v, master as float32 (param rounded to its dtype)."""
    c = constants(step=step, **hyper)
    x = master if master is not None else p
    x, m1, v1 = update(c, g, x, m, v, scale)
    km, kv = sr_keys(seed, step)
    index = np.arange(p.size, dtype=np.uint64)
    m1, v1 = to_bf16(sr_round(m1, km, index)), to_bf16(sr_round(v1, kv, index))
    param = to_bf16(x) if param_dtype == "bf16" else x
    return param, m1, v1, (x if master is not None else None)


def dynamic_code(signed):
    """dataflow_adamw_8bit_dynamic_code, independently: the midpoints of bitsandbytes'
    create_dynamic_map with 7 exponent bits, in float64, rounded once, sorted."""
    values = [0.0, 1.0]
    for i in range(7):
        items = 2 ** (i if signed else i + 1) + 1
        step = 0.9 / (items - 1)
        for j in range(items - 1):
            mean = ((0.1 + j * step) + (0.1 + (j + 1) * step)) / 2.0
            values.append(mean * 10.0 ** (i - 6))
            if signed:
                values.append(-(mean * 10.0 ** (i - 6)))
    return np.sort(np.array(values, np.float64)).astype(f32)


def dequantize(codes, absmax, qmap):
    return qmap[codes] * np.repeat(absmax, BLOCK)[:codes.size]


def quantize(x, qmap):
    """Per block of BLOCK: absmax = max |x|, code = number of scaled midpoints below x."""
    n = x.size
    absmax = np.array([np.max(np.abs(x[i:i + BLOCK])) for i in range(0, n, BLOCK)], f32)
    mids = (qmap[:-1] + qmap[1:]) * f32(0.5)
    thresholds = mids[None, :] * np.repeat(absmax, BLOCK)[:n, None]  # [n, 255] fp32 products
    codes = np.sum(x[:, None] > thresholds, axis=1).astype(np.uint8)
    return codes, absmax


def adamw_8bit(p, g, m, v, m_absmax, v_absmax, qmap_m, qmap_v, step, hyper, master=None, param_dtype="fp32",
               scale=None):
    """One step over codes and absmax; returns param, m, v, m_absmax, v_absmax, master."""
    c = constants(step=step, **hyper)
    x = master if master is not None else p
    x, m1, v1 = update(c, g, x, dequantize(m, m_absmax, qmap_m), dequantize(v, v_absmax, qmap_v), scale)
    mc, ma = quantize(m1, qmap_m)
    vc, va = quantize(v1, qmap_v)
    param = to_bf16(x) if param_dtype == "bf16" else x
    return param, mc, vc, ma, va, (x if master is not None else None)
