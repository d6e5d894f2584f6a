// set_mem: x[i] = value rounded (RNE) to x's dtype, for i < n.
#include "convert.cuh"
#include "op_params.cuh"

#define SET_MEM(DT)                                                                                \
	extern "C" __global__ void dataflow_cuda_set_mem_##DT(DATAFLOW_SET_MEM_PARAMS(DT##_t))      \
	{                                                                                          \
		const DT##_t v = store_##DT(value);                                                \
		FOR_EACH_INDEX(i, n)                                                               \
		x[i] = v;                                                                          \
	}

SET_MEM(fp32)
SET_MEM(fp16)
SET_MEM(bf16)
