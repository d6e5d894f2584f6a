/* clip_by_global_norm: as torch.nn.utils.clip_grad_norm_ in fp32,
 *   norm = sqrt(sumsq); scale = clamp((1 / (norm + 1e-6)) * max_norm, max = 1)
 * (torch evaluates max_norm / t as t.reciprocal() * max_norm). A NaN scale stays NaN, as
 * torch's clamp leaves it, so a non-finite norm poisons the step visibly. */
#include <math.h>

#include "dataflow/host_kernel.h"

static void clip(void **args, double sumsq)
{
	double max_norm = DATAFLOW_ARG(args, 1, double);
	float *scale = DATAFLOW_ARG(args, 2, float *), *norm_out = DATAFLOW_ARG(args, 3, float *);
	float norm = (float)sqrt(sumsq);
	float s = (1.0f / (norm + 1e-6f)) * (float)max_norm;
	scale[0] = s > 1.0f ? 1.0f : s;
	if (norm_out)
		norm_out[0] = norm;
}

void dataflow_host_clip_by_global_norm_fp32(void **args, int part, int num_parts)
{
	(void)part;
	(void)num_parts;
	clip(args, DATAFLOW_ARG(args, 0, const float *)[0]);
}

void dataflow_host_clip_by_global_norm_fp64(void **args, int part, int num_parts)
{
	(void)part;
	(void)num_parts;
	clip(args, DATAFLOW_ARG(args, 0, const double *)[0]);
}

/* Args: sumsq, max_norm, scale, norm. */
Dataflow_Status dataflow_host_clip_by_global_norm_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
							 Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	if (dataflow_op_require_tensors(op, 1u << 3) != DATAFLOW_OK)
		return dataflow_last_status();
	config->num_parts = 1;
	return DATAFLOW_OK;
}
