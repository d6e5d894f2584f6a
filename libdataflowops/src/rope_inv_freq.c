#include <math.h>

#include "dataflow/ops.h"

/* HF _compute_default_rope_parameters then _compute_llama3_parameters, op for op in fp32 as
 * torch evaluates them: Python scalars enter fp32 tensor math as fp32, and scalar / tensor is
 * tensor.reciprocal() * scalar. Only powf may differ from torch's pow, by an ulp. */
Dataflow_Status dataflow_rope_inv_freq(int64_t head_dim, float theta, float factor, float low_freq_factor,
				       float high_freq_factor, float original_max_position_embeddings, float *inv_freq)
{
	if (head_dim <= 0 || head_dim % 2 || head_dim > DATAFLOW_ROPE_MAX_HEAD_DIM)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rope_inv_freq: head_dim must be even and in [2, %d], got %lld",
					  DATAFLOW_ROPE_MAX_HEAD_DIM, (long long)head_dim);
	if (!(theta > 0.0f))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rope_inv_freq: theta must be > 0, got %g",
					  (double)theta);
	if (factor != 0.0f && !(factor > 0.0f && high_freq_factor > low_freq_factor && low_freq_factor > 0.0f &&
				original_max_position_embeddings > 0.0f))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rope_inv_freq: llama3 scaling needs factor > 0, high_freq_factor > "
					  "low_freq_factor > 0 and original_max_position_embeddings > 0, got %g, %g, %g, %g",
					  (double)factor, (double)high_freq_factor, (double)low_freq_factor,
					  (double)original_max_position_embeddings);
	if (!inv_freq)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rope_inv_freq: inv_freq is NULL");
	float low_freq_wavelen = original_max_position_embeddings / low_freq_factor;
	float high_freq_wavelen = original_max_position_embeddings / high_freq_factor;
	for (int64_t i = 0; i < head_dim / 2; i++) {
		float f = 1.0f / powf(theta, (float)(2 * i) / (float)head_dim);
		if (factor != 0.0f) {
			float wavelen = 1.0f / f * (float)(2.0 * M_PI);
			float scaled = wavelen > low_freq_wavelen ? f / factor : f;
			if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
				float smooth = (1.0f / wavelen * original_max_position_embeddings - low_freq_factor) /
					       (high_freq_factor - low_freq_factor);
				scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
			}
			f = scaled;
		}
		inv_freq[i] = f;
	}
	return DATAFLOW_OK;
}
