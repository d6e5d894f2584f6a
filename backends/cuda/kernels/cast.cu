// cast: dst = convert(src) over n elements: widen to fp32 (exact), round once (RNE) to the
// destination format.
#include "convert.cuh"
#include "op_params.cuh"

#define CAST(S, D)                                                                                 \
	extern "C" __global__ void dataflow_cuda_cast_##S##_to_##D(DATAFLOW_CAST_PARAMS(S##_t, D##_t)) \
	{                                                                                          \
		FOR_EACH_INDEX(i, n)                                                               \
		dst[i] = store_##D(load_##S(src[i]));                                              \
	}

CAST(fp32, fp16)
CAST(fp32, bf16)
CAST(fp32, fp8e4m3)
CAST(fp32, fp8e5m2)
CAST(fp16, fp32)
CAST(fp16, bf16)
CAST(fp16, fp8e4m3)
CAST(fp16, fp8e5m2)
CAST(bf16, fp32)
CAST(bf16, fp16)
CAST(bf16, fp8e4m3)
CAST(bf16, fp8e5m2)
CAST(fp8e4m3, fp32)
CAST(fp8e4m3, fp16)
CAST(fp8e4m3, bf16)
CAST(fp8e4m3, fp8e5m2)
CAST(fp8e5m2, fp32)
CAST(fp8e5m2, fp16)
CAST(fp8e5m2, bf16)
CAST(fp8e5m2, fp8e4m3)
