// add: out = alpha * a + beta * b over n elements, fp32 arithmetic (two products, one sum:
// compiled with --fmad=false), one rounding to the dtype. out may alias a or b.
#include "convert.cuh"
#include "op_params.cuh"

#define ADD(DT)                                                                                   \
	extern "C" __global__ void dataflow_cuda_add_##DT(DATAFLOW_ADD_PARAMS(DT##_t))             \
	{                                                                                         \
		FOR_EACH_INDEX(i, n)                                                              \
		out[i] = store_##DT(alpha * load_##DT(a[i]) + beta * load_##DT(b[i]));           \
	}

ADD(fp32)
ADD(fp16)
ADD(bf16)
