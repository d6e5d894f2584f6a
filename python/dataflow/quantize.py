"""Weight-only quantization of Linear weights [out_features, in_features], round-to-nearest,
in the layouts the qmatmul_int8 / qmatmul_int4 ops read (libdataflowops/catalogue.toml).

numpy on the host, not a device op: quantizing is a one-off step on weights read from a
checkpoint (`dataflow quantize` writes the result to disk), numpy's vectorized round/clip is
exactly the math to be checked, and it needs no handle or device memory for a model that may
not fit one unquantized.

  int8: one fp32 scale per output channel, s = max|w| / 127, q = clip(rint(w / s), -127, 127).
  int4: groups of group_size along k (the last one may be short), one fp32 scale per group;
        symmetric: s = max|w| / 7, code = clip(rint(w / s), -8, 7) + 8 (the ops' zero 8);
        with a zero point: s = (max - min) / 15, z = clip(rint(-min / s), 0, 15),
        code = clip(rint(w / s) + z, 0, 15). Codes are packed two per byte along k (k even
        in the low nibble), rows cdiv(k, 2) bytes.
An all-zero row or group gets scale 0 (every weight dequantizes to 0)."""
import numpy as np

from .errors import BadArgumentError

INT4_GROUP_SIZES = (32, 64, 96, 128)


def _matrix(w, what):
    w = np.asarray(w)
    if w.ndim != 2 or 0 in w.shape:
        raise BadArgumentError(f"{what}: expected a non-empty 2-D weight [out_features, in_features], "
                               f"got shape {w.shape}")
    if not np.issubdtype(w.dtype, np.floating):
        raise BadArgumentError(f"{what}: expected a floating-point weight, got {w.dtype}")
    w = w.astype(np.float32)
    if not np.isfinite(w).all():
        raise BadArgumentError(f"{what}: the weight holds NaN or Inf")
    return w


def _codes(w, s):
    """rint(w / s), 0 where s is 0"""
    safe = np.where(s == 0, np.float32(1), s)
    return np.where(s == 0, np.float32(0), np.rint(w / safe))


def quantize_int8(w):
    """(q int8 [N, K], scales fp32 [N]) of a float weight [N, K]."""
    w = _matrix(w, "quantize_int8")
    s = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    q = np.clip(_codes(w, s[:, None]), -127, 127).astype(np.int8)
    return q, s


def check_group_size(group_size, what="group_size"):
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size not in INT4_GROUP_SIZES:
        raise BadArgumentError(f"{what}: expected one of {', '.join(map(str, INT4_GROUP_SIZES))} "
                               f"(32..128, a multiple of 32), got {group_size!r}")
    return int(group_size)


def _groups(w, group_size):
    """w [N, K] as [N, G, group_size], the short last group padded with zeros"""
    n, k = w.shape
    g = -(-k // group_size)
    padded = np.zeros((n, g * group_size), np.float32)
    padded[:, :k] = w
    return padded.reshape(n, g, group_size)


def pack_int4(codes):
    """codes [N, K] in 0..15 -> uint8 [N, cdiv(K, 2)], element 2j low nibble, 2j + 1 high"""
    n, k = codes.shape
    padded = np.zeros((n, k + (k & 1)), np.uint8)
    padded[:, :k] = codes
    return (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed, k):
    """the inverse of pack_int4: codes uint8 [N, k]"""
    codes = np.empty((packed.shape[0], 2 * packed.shape[1]), np.uint8)
    codes[:, 0::2] = packed & 15
    codes[:, 1::2] = packed >> 4
    return codes[:, :k]


def quantize_int4(w, group_size=128, zero_point=False):
    """(packed uint8 [N, cdiv(K, 2)], scales fp32 [N, G], zeros uint8 [N, G] or None) of a
    float weight [N, K] in groups of group_size along K (G = cdiv(K, group_size))."""
    w = _matrix(w, "quantize_int4")
    group_size = check_group_size(group_size)
    n, k = w.shape
    grouped = _groups(w, group_size)
    if zero_point:
        # the range always holds 0, so a zero weight (and the padding) has an exact code
        lo = np.minimum(grouped.min(axis=2), 0)
        hi = np.maximum(grouped.max(axis=2), 0)
        s = ((hi - lo) / np.float32(15)).astype(np.float32)
        z = np.clip(_codes(-lo, s), 0, 15).astype(np.uint8)
        codes = np.clip(_codes(grouped, s[:, :, None]) + z[:, :, None], 0, 15)
    else:
        s = (np.abs(grouped).max(axis=2) / np.float32(7)).astype(np.float32)
        z = None
        codes = np.clip(_codes(grouped, s[:, :, None]), -8, 7) + 8
    codes = codes.reshape(n, -1)[:, :k].astype(np.uint8)
    return pack_int4(codes), s, z


def dequantize_int8(q, scales):
    """fp32 [N, K]: q * s per row, as the op's weights"""
    return q.astype(np.float32) * np.asarray(scales, np.float32)[:, None]


def dequantize_int4(packed, scales, k, group_size, zeros=None):
    """fp32 [N, k]: (code - zero) * scale per group, as the op's weights"""
    codes = unpack_int4(packed, k).astype(np.float32)
    g = np.arange(k) // group_size
    z = np.float32(8) if zeros is None else zeros[:, g].astype(np.float32)
    return (codes - z) * np.asarray(scales, np.float32)[:, g]


# ---- a model's quantized weights (config.json's quantization_config, the tensors' names) ----

QUANT_METHOD = "dataflow"
# the Linear weights a model's layers quantize (embedding, norms, biases and lm_head stay)
LINEAR_WEIGHTS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def quantization_config(bits, group_size=None, zero_point=False, lm_head=False):
    """config.json's quantization_config for weights quantized here (validated); lm_head: quantize
    lm_head too (an untied one)."""
    qc = {"quant_method": QUANT_METHOD, "bits": bits, "lm_head": bool(lm_head)}
    if bits == 4:
        qc.update(group_size=group_size, zero_point=bool(zero_point))
    return validate_quantization_config(qc, "quantization_config", BadArgumentError)


def validate_quantization_config(qc, where, error):
    """The checked quantization_config (bits 8, or bits 4 with group_size and zero_point; lm_head:
    whether lm_head is quantized too); `error` (a DataflowError class) names `where` and the field."""
    if not isinstance(qc, dict):
        raise error(f"{where}: quantization_config must be an object, got {qc!r:.60}")
    if qc.get("quant_method") != QUANT_METHOD:
        raise error(f"{where}: quantization_config.quant_method {qc.get('quant_method')!r:.60} is not supported; "
                    f"expected {QUANT_METHOD!r} (written by `dataflow quantize`)")
    bits = qc.get("bits")
    if isinstance(bits, bool) or bits not in (8, 4):
        raise error(f"{where}: quantization_config.bits must be 8 or 4, got {bits!r:.60}")
    lm_head = qc.get("lm_head", False)
    if not isinstance(lm_head, bool):
        raise error(f"{where}: quantization_config.lm_head must be true or false, got {lm_head!r:.60}")
    out = {"quant_method": QUANT_METHOD, "bits": bits, "lm_head": lm_head}
    if bits == 4:
        group = qc.get("group_size")
        if isinstance(group, bool) or group not in INT4_GROUP_SIZES:
            raise error(f"{where}: quantization_config.group_size must be one of "
                        f"{', '.join(map(str, INT4_GROUP_SIZES))} with bits 4, got {group!r:.60}")
        zero = qc.get("zero_point", False)
        if not isinstance(zero, bool):
            raise error(f"{where}: quantization_config.zero_point must be true or false, got {zero!r:.60}")
        out.update(group_size=group, zero_point=zero)
    elif qc.get("group_size") is not None or qc.get("zero_point"):
        raise error(f"{where}: quantization_config.group_size and zero_point are for bits 4, got bits 8")
    return out


def is_quantized_linear(name, qc):
    """whether quantization_config qc quantizes weight `name`"""
    if name == "lm_head.weight":
        return bool(qc.get("lm_head"))
    return name.startswith("model.layers.") and name.endswith(LINEAR_WEIGHTS)


def table_dtype(name, qc):
    """The datatype a quantized model (quantization_config qc, or None) stores tensor `name` in:
    "int8" / "uint8" for its codes and zero points, None for a floating tensor (scales included)."""
    if not qc:
        return None
    if is_quantized_linear(name, qc):
        return "int8" if qc["bits"] == 8 else "uint8"
    return "uint8" if name.endswith(".zeros") else None


def quantize_state(state, qc):
    """A float state dict -> the quantized model's: each layer Linear weight W (and lm_head's with
    qc["lm_head"]) becomes
    <prefix>.weight (int8, or packed int4 codes as uint8), <prefix>.scales (fp32) and, with zero
    points, <prefix>.zeros (uint8); the other tensors are kept as they are."""
    out = {}
    for name, value in state.items():
        if not is_quantized_linear(name, qc):
            out[name] = value
            continue
        prefix = name[:-len(".weight")]
        if qc["bits"] == 8:
            out[name], out[prefix + ".scales"] = quantize_int8(value)
            continue
        out[name], out[prefix + ".scales"], zeros = quantize_int4(value, qc["group_size"], qc["zero_point"])
        if zeros is not None:
            out[prefix + ".zeros"] = zeros
    return out
