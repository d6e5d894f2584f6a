/* Gradient housekeeping and the AdamW step over the resident model's blocks: one
 * dataflow_block_grad_norm_sq per block into a global fp64 sum of squares, clip_by_global_norm
 * to a device scale, one dataflow_block_adamw per block reading that scale (no host round
 * trip). Padding between tensors is zero in params, grads, m and v, and AdamW keeps it zero. */
#include "llama_internal.h"

Dataflow_Status dataflow_llama_zero_grads(Dataflow_Llama *m, int s)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama zero_grads: model is required");
	TRY(llama_refuse_quantized(m->config, "zero_grads"));
	for (int b = 0; b < m->num_blocks; b++)
		TRY(dataflow_set_mem(m->handle, s, m->blocks[b].grad, 0, (uint64_t)llama_block_numel(m->bm, b) * 4));
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_scale_grads(Dataflow_Llama *m, int s, float factor)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama scale_grads: model is required");
	TRY(llama_refuse_quantized(m->config, "scale_grads"));
	for (int b = 0; b < m->num_blocks; b++) {
		float *g = m->blocks[b].grad;
		TRY(dataflow_submit_add(m->handle, s, DATAFLOW_FP32, llama_block_numel(m->bm, b), factor, g, 0.0f, g, g));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_alloc_optimizer_state(Dataflow_Llama *m, int s)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama alloc_optimizer_state: model is required");
	TRY(llama_refuse_quantized(m->config, "alloc_optimizer_state"));
	Dataflow_Handle *h = m->handle;
	for (int b = 0; b < m->num_blocks; b++) {
		Dataflow_Block_Memory *blk = &m->blocks[b];
		uint64_t bytes = (uint64_t)llama_optimizer_state_numel(m, b) * 4;
		float **state[] = {&blk->m, &blk->v};
		for (int i = 0; i < 2; i++) {
			if (*state[i])
				continue;
			TRY(dataflow_alloc_mem(h, bytes, (void **)state[i]));
			TRY(dataflow_set_mem(h, s, *state[i], 0, bytes));
		}
	}
	return DATAFLOW_OK;
}

/* clipping by the global norm, then AdamW per block */
static Dataflow_Status adamw_blocks(Dataflow_Llama *m, int s, const Dataflow_AdamW_Params *params, double max_grad_norm,
				    int64_t step)
{
	double *sumsq = (double *)m->scalars;
	float *scale = (float *)((char *)m->scalars + 8), *norm = (float *)((char *)m->scalars + 12);
	int clip = max_grad_norm > 0;
	for (int b = 0; b < m->num_blocks; b++)
		TRY(dataflow_block_grad_norm_sq(m->bm, b, s, m->blocks[b].grad, m->opt_ws, sumsq, b > 0));
	TRY(dataflow_submit_clip_by_global_norm(m->handle, s, DATAFLOW_FP64, sumsq, clip ? max_grad_norm : 1e30, scale,
						norm));
	for (int b = 0; b < m->num_blocks; b++)
		TRY(dataflow_block_adamw(m->bm, b, s, &m->blocks[b], params, clip ? scale : NULL, step));
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_adamw_step(Dataflow_Llama *m, int s, const Dataflow_AdamW_Params *params,
					  double max_grad_norm, int64_t step)
{
	if (!m || !params)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama adamw_step: model and params are required");
	TRY(llama_refuse_quantized(m->config, "adamw_step"));
	if (!(max_grad_norm >= 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama adamw_step: max_grad_norm must be >= 0 (0: no clipping), got %g", max_grad_norm);
	if (step < 1)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama adamw_step: step must be >= 1, got %lld",
					  (long long)step);
	if (m->shard_optimizer)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, LLAMA_SHARDED_TRAINING, "adamw_step");
	TRY(dataflow_llama_alloc_optimizer_state(m, s));
	Dataflow_Trace_Span *span;
	TRY(llama_span_begin(m, s, DATAFLOW_LLAMA_WORK_OPTIMIZER, -1, 0, &span));
	TRY(adamw_blocks(m, s, params, max_grad_norm, step));
	TRY(llama_span_end(m, span));
	dataflow_trace_next_step(m->trace);
	return DATAFLOW_OK;
}
