#include <math.h>

#include "dataflow/ops.h"

/* HF's ROPE_INIT_FUNCTIONS (modeling_rope_utils.py), op for op in fp32 as torch evaluates them:
 * Python scalars enter fp32 tensor math as fp32, scalar / tensor is tensor.reciprocal() *
 * scalar, and what HF computes with Python's math (yarn's correction range, its mscale) is
 * double here too. Only powf may differ from torch's pow, by an ulp. */

static Dataflow_Status check(int64_t head_dim, const Dataflow_Rope_Scaling *s)
{
	if (head_dim <= 0 || head_dim % 2 || head_dim > DATAFLOW_ROPE_MAX_HEAD_DIM)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rope_inv_freq: head_dim must be even and in [2, %d], got %lld",
					  DATAFLOW_ROPE_MAX_HEAD_DIM, (long long)head_dim);
	if (!s)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rope_inv_freq: scaling is NULL");
	if (!(s->theta > 0.0f) || !isfinite(s->theta))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rope_inv_freq: theta must be > 0, got %g",
					  (double)s->theta);
	switch (s->type) {
	case DATAFLOW_ROPE_DEFAULT:
		return DATAFLOW_OK;
	case DATAFLOW_ROPE_LINEAR:
		if (!(s->factor > 0.0f) || !isfinite(s->factor))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "rope_inv_freq: linear scaling needs factor > 0, got %g", (double)s->factor);
		return DATAFLOW_OK;
	case DATAFLOW_ROPE_LLAMA3:
		if (!(s->factor > 0.0f && s->high_freq_factor > s->low_freq_factor && s->low_freq_factor > 0.0f &&
		      s->original_max_position_embeddings > 0.0f) || !isfinite(s->factor) || !isfinite(s->high_freq_factor))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "rope_inv_freq: llama3 scaling needs factor > 0, high_freq_factor > "
						  "low_freq_factor > 0 and original_max_position_embeddings > 0, got %g, %g, "
						  "%g, %g",
						  (double)s->factor, (double)s->high_freq_factor, (double)s->low_freq_factor,
						  (double)s->original_max_position_embeddings);
		return DATAFLOW_OK;
	case DATAFLOW_ROPE_YARN:
		if (!(s->factor > 0.0f && s->original_max_position_embeddings > 0.0f && s->beta_fast >= 0.0f &&
		      s->beta_slow >= 0.0f && s->attention_factor >= 0.0f && s->mscale >= 0.0f &&
		      s->mscale_all_dim >= 0.0f) ||
		    !isfinite(s->factor) || !isfinite(s->beta_fast) || !isfinite(s->beta_slow) ||
		    !isfinite(s->attention_factor) || !isfinite(s->mscale) || !isfinite(s->mscale_all_dim))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "rope_inv_freq: yarn scaling needs factor > 0 and "
						  "original_max_position_embeddings > 0, and beta_fast, beta_slow, "
						  "attention_factor, mscale, mscale_all_dim finite and >= 0 (0: HF's default); "
						  "got %g, %g, %g, %g, %g, %g, %g",
						  (double)s->factor, (double)s->original_max_position_embeddings,
						  (double)s->beta_fast, (double)s->beta_slow, (double)s->attention_factor,
						  (double)s->mscale, (double)s->mscale_all_dim);
		return DATAFLOW_OK;
	default:
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rope_inv_freq: type must be a Dataflow_Rope_Type (default 0, linear 1, llama3 2, "
					  "yarn 3), got %d",
					  s->type);
	}
}

/* _compute_llama3_parameters' smoothing of one default frequency f. */
static float llama3(const Dataflow_Rope_Scaling *s, float f)
{
	float low_freq_wavelen = s->original_max_position_embeddings / s->low_freq_factor;
	float high_freq_wavelen = s->original_max_position_embeddings / s->high_freq_factor;
	float wavelen = 1.0f / f * (float)(2.0 * M_PI);
	float scaled = wavelen > low_freq_wavelen ? f / s->factor : f;
	if (!(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen)) {
		float smooth = (1.0f / wavelen * s->original_max_position_embeddings - s->low_freq_factor) /
			       (s->high_freq_factor - s->low_freq_factor);
		scaled = (1.0f - smooth) * scaled / s->factor + smooth * scaled;
	}
	return scaled;
}

/* yarn's get_mscale */
static double yarn_mscale(double scale, double mscale)
{
	return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* yarn's find_correction_dim */
static double yarn_correction_dim(double rotations, double dim, double base, double max_position)
{
	return dim * log(max_position / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

/* _compute_yarn_parameters: the default frequencies (1 / pos_freq) and the interpolated ones
 * (1 / (factor pos_freq)) blended by a linear ramp over the correction range. */
static void yarn(const Dataflow_Rope_Scaling *s, int64_t head_dim, float *inv_freq, float *attention_factor)
{
	double dim = (double)head_dim, base = s->theta, omax = s->original_max_position_embeddings;
	double beta_fast = s->beta_fast > 0.0f ? s->beta_fast : 32.0, beta_slow = s->beta_slow > 0.0f ? s->beta_slow : 1.0;
	double low = yarn_correction_dim(beta_fast, dim, base, omax), high = yarn_correction_dim(beta_slow, dim, base, omax);
	if (s->truncate) {
		low = floor(low);
		high = ceil(high);
	}
	low = low > 0.0 ? low : 0.0;
	high = high < dim - 1.0 ? high : dim - 1.0;
	if (low == high)
		high += 0.001; /* HF: prevents a singularity */
	float lo = (float)low, span = (float)(high - low);
	for (int64_t i = 0; i < head_dim / 2; i++) {
		float pos_freq = powf(s->theta, (float)(2 * i) / (float)head_dim);
		float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (s->factor * pos_freq);
		float ramp = ((float)i - lo) / span;
		ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
		float extrapolation_factor = 1.0f - ramp;
		inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
	}
	if (s->attention_factor > 0.0f)
		*attention_factor = s->attention_factor;
	else if (s->mscale > 0.0f && s->mscale_all_dim > 0.0f)
		*attention_factor =
			(float)(yarn_mscale(s->factor, s->mscale) / yarn_mscale(s->factor, s->mscale_all_dim));
	else
		*attention_factor = (float)yarn_mscale(s->factor, 1.0);
}

Dataflow_Status dataflow_rope_inv_freq(int64_t head_dim, const Dataflow_Rope_Scaling *scaling, float *inv_freq,
				       float *attention_factor)
{
	Dataflow_Status st = check(head_dim, scaling);
	if (st != DATAFLOW_OK)
		return st;
	if (!inv_freq)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rope_inv_freq: inv_freq is NULL");
	float factor = 1.0f;
	if (scaling->type == DATAFLOW_ROPE_YARN) {
		yarn(scaling, head_dim, inv_freq, &factor);
	} else {
		for (int64_t i = 0; i < head_dim / 2; i++) {
			float f = 1.0f / powf(scaling->theta, (float)(2 * i) / (float)head_dim);
			inv_freq[i] = scaling->type == DATAFLOW_ROPE_LLAMA3 ? llama3(scaling, f)
				      : scaling->type == DATAFLOW_ROPE_LINEAR ? f / scaling->factor
									      : f;
		}
	}
	if (attention_factor)
		*attention_factor = factor;
	return DATAFLOW_OK;
}
