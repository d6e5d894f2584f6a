"""AdamW moments as the executor stores them (ring_plan.h, Dataflow_Optimizer_State): fp32, bf16,
or blockwise 8-bit (uint8 codes of the dynamic code, padded to 64 bytes, then an fp32 absmax per
ADAMW_8BIT_BLOCK elements), one raw buffer per block and moment. A checkpoint keeps them as
trained; these convert between precisions when a load asks for it (decode to fp32, then encode
as the kernels round: bf16 to nearest even, 8-bit to the nearest code of each block's absmax)."""
import numpy as np

from .. import dtypes
from .._ffi import ringlib
from ..ops import ADAMW_8BIT_BLOCK, adamw_8bit_dynamic_code
from ..ring import optimizer_state_enum

MOMENTS = ("exp_avg", "exp_avg_sq")  # m (signed), v (unsigned), as torch.optim.AdamW names them


def moment_bytes(state, numel):
    return int(ringlib.dataflow_optimizer_state_bytes(optimizer_state_enum(state), numel))


def _code(moment):
    return adamw_8bit_dynamic_code(moment == "exp_avg")


def decode(state, raw, numel, moment):
    """float32 [numel] of one block's moment stored as `state` (raw: uint8 bytes)."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)  # the bytes as stored, whatever the array type
    if state == "fp32":
        return raw.view(np.float32)[:numel].copy()
    if state == "bf16":
        return dtypes.decode(raw.view(np.uint16)[:numel], "bf16").astype(np.float32)
    absmax = raw[-(-numel // 64) * 64:].view(np.float32)
    return _code(moment)[raw[:numel]] * np.repeat(absmax, ADAMW_8BIT_BLOCK)[:numel]


def encode(state, values, moment):
    """The raw bytes of float32 values of one block's moment stored as `state`."""
    values = np.ascontiguousarray(values, np.float32)
    if state == "fp32":
        return values.view(np.uint8).copy()
    if state == "bf16":
        return dtypes.encode(values, "bf16").view(np.uint8).copy()
    n, code = values.size, _code(moment)
    out = np.zeros(moment_bytes(state, n), np.uint8)
    mids = (code[:-1] + code[1:]) * np.float32(0.5)
    absmax = np.empty(-(-n // ADAMW_8BIT_BLOCK), np.float32)
    for k, start in enumerate(range(0, n, ADAMW_8BIT_BLOCK)):
        block = values[start:start + ADAMW_8BIT_BLOCK]
        absmax[k] = np.max(np.abs(block))
        out[start:start + block.size] = np.sum(block[:, None] > mids[None, :] * absmax[k], axis=1)
    out[-(-n // 64) * 64:] = absmax.view(np.uint8)
    return out
