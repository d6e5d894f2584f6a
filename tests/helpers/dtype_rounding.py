"""Rounding through a dtype the way the kernels store it, for op oracles: quantize() an fp32
array to a dtype's values, the dtypes' unsigned views (UINT) and torch dtypes (TORCH)."""
import ml_dtypes
import numpy as np
import torch


REF = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8e4m3": ml_dtypes.float8_e4m3fn,
       "fp8e5m2": ml_dtypes.float8_e5m2}


UINT = {"fp32": np.uint32, "fp16": np.uint16, "bf16": np.uint16, "fp8e4m3": np.uint8, "fp8e5m2": np.uint8}


TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def quantize(x, dtype):
    """x rounded to dtype, as float32 values (the values a device array of dtype holds)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, np.float32).astype(REF[dtype]).astype(np.float32)
