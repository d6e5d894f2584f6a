// clip_by_global_norm: as torch.nn.utils.clip_grad_norm_ in fp32 (and the host kernel),
//   norm = sqrt(sumsq); scale = min(1, (1 / (norm + 1e-6)) * max_norm)
// A NaN scale stays NaN (torch's clamp). One thread: the input is one number.
#include "dtype.cuh"
#include "op_params.cuh"

__device__ void clip(double sumsq, double max_norm, float *scale, float *norm_out)
{
	const float norm = (float)sqrt(sumsq);
	const float s = (1.0f / (norm + 1e-6f)) * (float)max_norm;
	scale[0] = s > 1.0f ? 1.0f : s;
	if (norm_out)
		norm_out[0] = norm;
}

extern "C" __global__ void dataflow_cuda_clip_by_global_norm_fp32(DATAFLOW_CLIP_BY_GLOBAL_NORM_PARAMS(float))
{
	clip((double)sumsq[0], max_norm, scale, norm);
}

extern "C" __global__ void dataflow_cuda_clip_by_global_norm_fp64(DATAFLOW_CLIP_BY_GLOBAL_NORM_PARAMS(double))
{
	clip(sumsq[0], max_norm, scale, norm);
}
