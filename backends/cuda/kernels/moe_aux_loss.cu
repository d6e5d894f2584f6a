// moe_aux_loss and moe_aux_loss_bwd (HF's load_balancing_loss_func over every layer's stats),
// in fp32, as the host kernels:
//   loss = E * sum_e (stats[0, e] / R) * (stats[1, e] / R)                     (one thread)
//   g_e = d_loss * E * (stats[0, e] / R) / R,  dl[t] += p[t] * (g - p[t] . g)   (one thread per token)
#include "convert.cuh"
#include "op_params.cuh"

extern "C" __global__ void dataflow_cuda_moe_aux_loss_fp32(DATAFLOW_MOE_AUX_LOSS_PARAMS(fp32_t))
{
	if (blockIdx.x != 0 || threadIdx.x != 0)
		return;
	const float r = (float)rows;
	float sum = 0.0f;
	for (long long e = 0; e < experts; e++)
		sum += (stats[e] / r) * (stats[experts + e] / r);
	loss[0] = sum * (float)experts;
}

extern "C" __global__ void dataflow_cuda_moe_aux_loss_bwd_fp32(DATAFLOW_MOE_AUX_LOSS_BWD_PARAMS(fp32_t))
{
	const float r = (float)rows, scale = d_loss * (float)experts;
	FOR_EACH_INDEX(t, tokens)
	{
		const float *p = probs + t * experts;
		float *dl = d_logits + t * experts, pg = 0.0f;
		for (long long e = 0; e < experts; e++)
			pg += p[e] * (scale * (stats[e] / r) / r);
		for (long long e = 0; e < experts; e++)
			dl[e] += p[e] * (scale * (stats[e] / r) / r - pg);
	}
}
