/* Gradient housekeeping and the AdamW step over the model's blocks: one grad_norm_sq per block
 * into a global fp64 sum of squares, clip_by_global_norm to a device scale, one adamw_step
 * per block reading that scale (no host round trip). Padding between tensors is zero in
 * params, grads, m and v, and AdamW keeps it zero. */
#include "llama_internal.h"

Dataflow_Status dataflow_llama_zero_grads(Dataflow_Llama *m, int s)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama zero_grads: model is required");
	Dataflow_Handle *h = m->handle;
	for (int b = 0; b < m->num_blocks; b++)
		TRY(dataflow_set_mem(h, s, m->blocks[b].grad, 0, (uint64_t)m->blocks[b].numel * 4));
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_scale_grads(Dataflow_Llama *m, int s, float factor)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama scale_grads: model is required");
	for (int b = 0; b < m->num_blocks; b++) {
		float *g = m->blocks[b].grad;
		TRY(dataflow_submit_add(m->handle, s, DATAFLOW_FP32, m->blocks[b].numel, factor, g, 0.0f, g, g));
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_alloc_optimizer_state(Dataflow_Llama *m, int s)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama alloc_optimizer_state: model is required");
	Dataflow_Handle *h = m->handle;
	for (int b = 0; b < m->num_blocks; b++) {
		Llama_Block *blk = &m->blocks[b];
		uint64_t bytes = (uint64_t)blk->numel * 4;
		if (!blk->m) {
			TRY(dataflow_alloc_mem(h, bytes, (void **)&blk->m));
			TRY(dataflow_set_mem(h, s, blk->m, 0, bytes));
		}
		if (!blk->v) {
			TRY(dataflow_alloc_mem(h, bytes, (void **)&blk->v));
			TRY(dataflow_set_mem(h, s, blk->v, 0, bytes));
		}
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_adamw_step(Dataflow_Llama *m, int s, double lr, double beta1, double beta2, double eps,
					  double weight_decay, double max_grad_norm, int64_t step, float *grad_norm_out)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama adamw_step: model is required");
	if (!(max_grad_norm >= 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama adamw_step: max_grad_norm must be >= 0 (0: no clipping), got %g", max_grad_norm);
	if (step < 1)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama adamw_step: step must be >= 1, got %lld",
					  (long long)step);
	Dataflow_Handle *h = m->handle;
	TRY(dataflow_llama_alloc_optimizer_state(m, s));
	double *sumsq = (double *)m->scalars;
	float *scale = (float *)((char *)m->scalars + 8), *norm = (float *)((char *)m->scalars + 12);
	int clip = max_grad_norm > 0;
	if (clip || grad_norm_out) {
		for (int b = 0; b < m->num_blocks; b++)
			TRY(dataflow_submit_grad_norm_sq(h, s, DATAFLOW_FP32, DATAFLOW_FP64, m->blocks[b].numel,
							 m->blocks[b].grad, m->gn_ws, sumsq, b > 0));
		TRY(dataflow_submit_clip_by_global_norm(h, s, DATAFLOW_FP64, sumsq, clip ? max_grad_norm : 1e30, scale,
							norm));
	}
	for (int b = 0; b < m->num_blocks; b++) {
		Llama_Block *blk = &m->blocks[b];
		TRY(dataflow_submit_adamw_step(h, s, m->config.dtype, DATAFLOW_FP32, blk->numel, blk->param, blk->grad,
					       blk->m, blk->v, NULL, clip ? scale : NULL, lr, beta1, beta2, eps,
					       weight_decay, step));
	}
	if (grad_norm_out) {
		TRY(dataflow_submit_outbound_transfer(h, s, grad_norm_out, norm, 4));
		TRY(dataflow_sync_stream(h, s));
	}
	return DATAFLOW_OK;
}
