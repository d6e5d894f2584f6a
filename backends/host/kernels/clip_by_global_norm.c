/* clip_by_global_norm: as torch.nn.utils.clip_grad_norm_ in fp32,
 *   norm = sqrt(sumsq); scale = clamp((1 / (norm + 1e-6)) * max_norm, max = 1)
 * (torch evaluates max_norm / t as t.reciprocal() * max_norm). A NaN scale stays NaN, as
 * torch's clamp leaves it, so a non-finite norm poisons the step visibly. */
#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"

static void clip(const Dataflow_Clip_By_Global_Norm_Args *a, double sumsq)
{
	float norm = (float)sqrt(sumsq);
	float s = (1.0f / (norm + 1e-6f)) * (float)a->max_norm;
	a->scale[0] = s > 1.0f ? 1.0f : s;
	if (a->norm)
		a->norm[0] = norm;
}

void dataflow_host_clip_by_global_norm_fp32(void **args, int part, int num_parts)
{
	(void)part;
	(void)num_parts;
	Dataflow_Clip_By_Global_Norm_Args a = dataflow_clip_by_global_norm_args(args);
	clip(&a, ((const float *)a.sumsq)[0]);
}

void dataflow_host_clip_by_global_norm_fp64(void **args, int part, int num_parts)
{
	(void)part;
	(void)num_parts;
	Dataflow_Clip_By_Global_Norm_Args a = dataflow_clip_by_global_norm_args(args);
	clip(&a, ((const double *)a.sumsq)[0]);
}

DATAFLOW_HOST_ONE_PART_LAUNCH(dataflow_host_clip_by_global_norm_launch)
