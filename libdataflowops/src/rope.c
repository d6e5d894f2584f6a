#include <math.h>

#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype rope_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

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

static Dataflow_Status rope_skeleton(Op_Skeleton *skeleton, const char *op, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype(op, "x", dtype, rope_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT32,
				     DATAFLOW_FP32, dtype, dtype};
	return dataflow_op_skeleton_init(skeleton, op, 7, dtypes);
}

Dataflow_Status dataflow_rope_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	return rope_skeleton(skeleton, "rope", dtype);
}

Dataflow_Status dataflow_rope_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	return rope_skeleton(skeleton, "rope_bwd", dtype);
}

static Dataflow_Status rope_submit(Dataflow_Handle *handle, int stream_id, const char *op, const char *in_name,
				   const char *out_name, DataflowDatatype dtype, int64_t num_tokens, int64_t num_heads,
				   int64_t head_dim, const void *positions, const void *inv_freq, const void *in,
				   void *out)
{
	Op_Skeleton skeleton;
	int64_t rows, numel;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = rope_skeleton(&skeleton, op, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "num_tokens", num_tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "num_heads", num_heads);
	if (st == DATAFLOW_OK && (head_dim <= 0 || head_dim % 2 || head_dim > DATAFLOW_ROPE_MAX_HEAD_DIM))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: head_dim must be even and in [2, %d], got %lld",
					op, DATAFLOW_ROPE_MAX_HEAD_DIM, (long long)head_dim);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "num_tokens x num_heads", num_tokens, num_heads, &rows);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "num_tokens x num_heads x head_dim", rows, head_dim, &numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "positions", positions, DATAFLOW_INT32, num_tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "inv_freq", inv_freq, DATAFLOW_FP32, head_dim / 2);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, in_name, in, dtype, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, out_name, out, dtype, numel);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&num_tokens, &num_heads, &head_dim, &positions, &inv_freq, &in, &out};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_rope(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t num_tokens,
				     int64_t num_heads, int64_t head_dim, const void *positions, const void *inv_freq,
				     const void *x, void *out)
{
	return rope_submit(handle, stream_id, "rope", "x", "out", dtype, num_tokens, num_heads, head_dim, positions,
			   inv_freq, x, out);
}

Dataflow_Status dataflow_submit_rope_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					 int64_t num_tokens, int64_t num_heads, int64_t head_dim, const void *positions,
					 const void *inv_freq, const void *dy, void *dx)
{
	return rope_submit(handle, stream_id, "rope_bwd", "dy", "dx", dtype, num_tokens, num_heads, head_dim, positions,
			   inv_freq, dy, dx);
}
