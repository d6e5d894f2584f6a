/* The per-block calls: argument checks, dispatch by role, the per-block optimizer, and the
 * matmul shapes every block uses. Nothing here allocates or waits. */
#include "blocked_internal.h"

typedef enum { CALL_FORWARD, CALL_RECOMPUTE, CALL_BACKWARD_X, CALL_BACKWARD_W } Call;

static const char *const call_names[] = {"block forward", "block recompute", "block backward_x", "block backward_w"};

static Dataflow_Status need(Call call, int block, const char *what, const void *ptr)
{
	if (ptr)
		return DATAFLOW_OK;
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s (block %d): %s is required", call_names[call], block,
				  what);
}

static Dataflow_Status check_common(const Dataflow_Blocked_Model *m, int block, Call call,
				    const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	if (!m || !mem || !a)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: model, memory and args are required",
					  call_names[call]);
	if (block < 0 || block >= m->num_blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: block must be in [0, %d), got %d",
					  call_names[call], m->num_blocks, block);
	TRY(need(call, block, "args->batch", a->batch));
	const Dataflow_Llama_Batch *b = a->batch;
	if (b->num_tokens <= 0 || b->num_tokens > ((int64_t)1 << 31) || b->num_docs <= 0 || b->num_docs > b->num_tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s (block %d): need 1 <= num_docs <= num_tokens <= 2^31, got %lld documents, "
					  "%lld tokens",
					  call_names[call], block, (long long)b->num_docs, (long long)b->num_tokens);
	if ((int)a->level < 0 || a->level >= DATAFLOW_NUM_SAVE_LEVELS)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s (block %d): level must be in [0, %d), got %d",
					  call_names[call], block, DATAFLOW_NUM_SAVE_LEVELS, (int)a->level);
	Dataflow_Block_Role role = llama_block_role(m, block);
	if (call == CALL_BACKWARD_W)
		TRY(need(call, block, "memory->grad", mem->grad));
	else
		TRY(need(call, block, "memory->param", mem->param));
	if (role == DATAFLOW_BLOCK_EMBEDDING)
		return need(call, block, "batch->tokens", b->tokens);
	if (role == DATAFLOW_BLOCK_HEAD && m->config.tie_embeddings) {
		TRY(need(call, block, "args->tied (the embedding block's memory, tied model)", a->tied));
		TRY(need(call, block, call == CALL_BACKWARD_W ? "args->tied->grad" : "args->tied->param",
			 call == CALL_BACKWARD_W ? (const void *)a->tied->grad : a->tied->param));
	}
	int64_t saved, recomputed;
	llama_acts_layout(m, role, a->level, b->num_tokens, NULL, NULL, NULL, &saved, &recomputed);
	TRY(need(call, block, "args->x", a->x));
	TRY(need(call, block, "args->workspace", a->workspace));
	if (saved)
		TRY(need(call, block, "args->saved", a->saved));
	if (recomputed)
		TRY(need(call, block, "args->recomputed", a->recomputed));
	if (role == DATAFLOW_BLOCK_LAYER) {
		TRY(need(call, block, "batch->cu_seqlens", b->cu_seqlens));
		TRY(need(call, block, "batch->positions", b->positions));
	}
	return DATAFLOW_OK;
}

/* A layer's K/V context: the forward needs k, v, cu_k, past and a one-document chunk;
 * backward_x also the gradient accumulators dk, dv. */
static Dataflow_Status check_kv(Call call, int block, const Dataflow_Block_Args *a)
{
	const Dataflow_Block_KV *kv = a->kv;
	if (!kv || call == CALL_BACKWARD_W)
		return DATAFLOW_OK;
	if (a->batch->num_docs != 1 || !kv->k || !kv->v || !kv->cu_k || kv->past < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s (block %d): a K/V context needs a one-document chunk, k, v, cu_k and "
					  "past >= 0",
					  call_names[call], block);
	if (call == CALL_BACKWARD_X && (!kv->dk || !kv->dv))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s (block %d): a K/V context needs its gradients kv->dk and kv->dv",
					  call_names[call], block);
	return DATAFLOW_OK;
}

/* The load-balancing loss's statistics and the pass's tokens (at least this chunk's). */
static Dataflow_Status check_router(Call call, int block, const Dataflow_Block_Args *a)
{
	TRY(need(call, block, "args->router->stats", a->router->stats));
	if (a->router->tokens < a->batch->num_tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s (block %d): args->router->tokens (the pass's) must be >= the chunk's %lld, got "
					  "%lld",
					  call_names[call], block, (long long)a->batch->num_tokens,
					  (long long)a->router->tokens);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_block_forward(const Dataflow_Blocked_Model *m, int block, int stream,
				       const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	TRY(check_common(m, block, CALL_FORWARD, mem, a));
	switch (llama_block_role(m, block)) {
	case DATAFLOW_BLOCK_EMBEDDING:
		TRY(need(CALL_FORWARD, block, "args->y", a->y));
		return llama_embedding_forward(m, stream, mem, a);
	case DATAFLOW_BLOCK_LAYER:
		TRY(need(CALL_FORWARD, block, "args->y", a->y));
		TRY(check_kv(CALL_FORWARD, block, a));
		if (a->router)
			TRY(check_router(CALL_FORWARD, block, a));
		return llama_layer_forward(m, stream, mem, a, 0);
	case DATAFLOW_BLOCK_HEAD:
		if (a->token_losses) {
			TRY(need(CALL_FORWARD, block, "batch->labels (with token_losses)", a->batch->labels));
			if (a->y)
				return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
							  "block forward (head): with token_losses the logits stay in "
							  "args->saved (they become the dlogits); args->y must be NULL");
		}
		return llama_head_forward(m, stream, mem, a);
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_block_recompute(const Dataflow_Blocked_Model *m, int block, int stream,
					 const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	TRY(check_common(m, block, CALL_RECOMPUTE, mem, a));
	if (llama_block_role(m, block) != DATAFLOW_BLOCK_LAYER || a->level == DATAFLOW_SAVE_ALL)
		return DATAFLOW_OK;
	TRY(check_kv(CALL_RECOMPUTE, block, a));
	return llama_layer_forward(m, stream, mem, a, 1);
}

static Dataflow_Status check_backward(const Dataflow_Blocked_Model *m, int block, Call call,
				      const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	TRY(check_common(m, block, call, mem, a));
	Dataflow_Block_Role role = llama_block_role(m, block);
	if (role == DATAFLOW_BLOCK_LAYER)
		TRY(check_kv(call, block, a));
	if (role != DATAFLOW_BLOCK_HEAD)
		TRY(need(call, block, "args->dy", a->dy));
	if (role != DATAFLOW_BLOCK_EMBEDDING)
		TRY(need(call, block, "args->dacts", a->dacts));
	if (role != DATAFLOW_BLOCK_EMBEDDING && call == CALL_BACKWARD_X)
		TRY(need(call, block, "args->dx", a->dx));
	if (role == DATAFLOW_BLOCK_LAYER && call == CALL_BACKWARD_X && m->config.router_aux_loss_coef > 0)
		/* without the load-balancing loss the gradient would differ from HF's silently */
		TRY(need(call, block, "args->router (router_aux_loss_coef > 0: the pass's router statistics)",
			 a->router));
	if (role == DATAFLOW_BLOCK_LAYER && call == CALL_BACKWARD_X && a->router)
		TRY(check_router(call, block, a));
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_block_backward_x(const Dataflow_Blocked_Model *m, int block, int stream,
					  const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	if (m && block == 0 && mem && a) /* the embedding has no input to differentiate */
		return DATAFLOW_OK;
	TRY(check_backward(m, block, CALL_BACKWARD_X, mem, a));
	return llama_block_role(m, block) == DATAFLOW_BLOCK_LAYER ? llama_layer_backward_x(m, stream, mem, a)
								  : llama_head_backward_x(m, stream, mem, a);
}

Dataflow_Status dataflow_block_backward_w(const Dataflow_Blocked_Model *m, int block, int stream,
					  const Dataflow_Block_Memory *mem, const Dataflow_Block_Args *a)
{
	TRY(check_backward(m, block, CALL_BACKWARD_W, mem, a));
	switch (llama_block_role(m, block)) {
	case DATAFLOW_BLOCK_EMBEDDING: return llama_embedding_backward_w(m, stream, mem, a);
	case DATAFLOW_BLOCK_LAYER: return llama_layer_backward_w(m, stream, mem, a);
	case DATAFLOW_BLOCK_HEAD: return llama_head_backward_w(m, stream, mem, a);
	}
	return DATAFLOW_OK;
}

static Dataflow_Status check_block(const Dataflow_Blocked_Model *m, int block, const char *call)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: model is required", call);
	if (block < 0 || block >= m->num_blocks)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: block must be in [0, %d), got %d", call,
					  m->num_blocks, block);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_block_grad_norm_sq(const Dataflow_Blocked_Model *m, int block, int stream, const float *grad,
					    void *workspace, double *sumsq, int accumulate)
{
	TRY(check_block(m, block, "block grad_norm_sq"));
	return dataflow_submit_grad_norm_sq(m->handle, stream, DATAFLOW_FP32, DATAFLOW_FP64, llama_block_numel(m, block),
					    grad, workspace, sumsq, accumulate);
}

Dataflow_Status dataflow_block_adamw(const Dataflow_Blocked_Model *m, int block, int stream,
				     const Dataflow_Block_Memory *mem, const Dataflow_AdamW_Params *p,
				     const float *clip_scale, int64_t step)
{
	TRY(check_block(m, block, "block adamw"));
	if (!mem || !p)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "block adamw: memory and params are required");
	return dataflow_submit_adamw_step(m->handle, stream, m->config.dtype, DATAFLOW_FP32, llama_block_numel(m, block),
					  mem->param, mem->grad, mem->m, mem->v, mem->master, clip_scale, p->lr,
					  p->beta1, p->beta2, p->eps, p->weight_decay, step);
}

Dataflow_Status llama_linear(const Dataflow_Blocked_Model *m, int s, const void *x, const void *W,
			     const void *residual, void *out, int64_t T, int64_t n_out, int64_t n_in)
{
	DataflowDatatype d = m->config.dtype;
	return dataflow_submit_matmul(m->handle, s, d, d, x, W, residual, out, T, n_out, n_in, 0, 1, 1.0f,
				      residual ? 1.0f : 0.0f);
}

Dataflow_Status llama_quantized_linear(const Dataflow_Blocked_Model *m, int s, const void *x, const void *region,
				       const void *residual, void *out, int64_t T, int64_t n_out, int64_t n_in)
{
	const Dataflow_Llama_Config *c = &m->config;
	Llama_Quant_Parts p = llama_quant_parts(c, n_out, n_in);
	const char *r = region;
	if (c->quant_bits == 8)
		return dataflow_submit_qmatmul_int8(m->handle, s, c->dtype, DATAFLOW_FP32, c->dtype, T, n_out, n_in, x, r,
						    r + p.scales, residual, out);
	return dataflow_submit_qmatmul_int4(m->handle, s, c->dtype, DATAFLOW_FP32, c->dtype, T, n_out, n_in,
					    c->quant_group_size, x, r, r + p.scales,
					    c->quant_zero_point ? r + p.zeros : NULL, residual, out);
}

Dataflow_Status llama_weight_grad(const Dataflow_Blocked_Model *m, int s, const void *dy, const void *x, float *g,
				  int64_t T, int64_t n_out, int64_t n_in)
{
	return dataflow_submit_matmul(m->handle, s, m->config.dtype, DATAFLOW_FP32, dy, x, g, g, n_out, n_in, T, 1, 0,
				      1.0f, 1.0f);
}

Dataflow_Status llama_input_grad(const Dataflow_Blocked_Model *m, int s, const void *dy, const void *W, void *dx,
				 int64_t T, int64_t n_out, int64_t n_in, int accumulate)
{
	DataflowDatatype d = m->config.dtype;
	return dataflow_submit_matmul(m->handle, s, d, d, dy, W, accumulate ? dx : NULL, dx, T, n_in, n_out, 0, 0, 1.0f,
				      accumulate ? 1.0f : 0.0f);
}

Dataflow_Status llama_norm_weight_grad(const Dataflow_Blocked_Model *m, int s, int64_t rows, int64_t width,
				       const void *dxn, const void *x, const float *rstd, float *gw,
				       void *const ws[WS_COUNT])
{
	Dataflow_Handle *h = m->handle;
	TRY(dataflow_submit_rms_norm_bwd_w(h, s, m->config.dtype, DATAFLOW_FP32, rows, width, dxn, x, rstd, ws[WS_RMS],
					   ws[WS_DW]));
	return dataflow_submit_add(h, s, DATAFLOW_FP32, width, 1.0f, gw, 1.0f, ws[WS_DW], gw);
}

Dataflow_Status llama_bias_rows(const Dataflow_Blocked_Model *m, int s, const void *ones, const void *b,
				const void *residual, void *out, int64_t T, int64_t n)
{
	DataflowDatatype d = m->config.dtype;
	return dataflow_submit_matmul(m->handle, s, d, d, ones, b, residual, out, T, n, 1, 0, 0, 1.0f,
				      residual ? 1.0f : 0.0f);
}
