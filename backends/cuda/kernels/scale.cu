// scale: out = alpha * x over n elements, one fp32 product rounded once to the dtype. out may
// alias x.
#include "convert.cuh"
#include "op_params.cuh"

#define SCALE(DT)                                                                                  \
	extern "C" __global__ void dataflow_cuda_scale_##DT(DATAFLOW_SCALE_PARAMS(DT##_t))          \
	{                                                                                          \
		FOR_EACH_INDEX(i, n)                                                               \
		out[i] = store_##DT(alpha * load_##DT(x[i]));                                      \
	}

SCALE(fp32)
SCALE(fp16)
SCALE(bf16)
