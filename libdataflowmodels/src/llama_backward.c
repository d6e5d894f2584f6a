/* Llama loss and backward: cross-entropy over aligned labels, then the chain rule through the
 * head, every layer (last to first) and the embedding. Weight gradients are fp32 and
 * accumulate (matmul with beta = 1); activation gradients are in the model dtype.
 * Per layer, with dres = dL/d(layer output) on entry and dL/d(layer input) on exit:
 *   act = swiglu(gate, up)            (recomputed: one elementwise op)
 *   gWd += dres^T act ; dact = dres Wd ; dgate, dup = swiglu_bwd(dact)
 *   gWg += dgate^T xn2 ; gWu += dup^T xn2 ; dxn = dgate Wg + dup Wu
 *   dres += rms_norm_bwd_x(dxn, hmid) ; gln2 += rms_norm_bwd_w(dxn, hmid)
 *   gWo += dres^T att ; datt = dres Wo ; dq, dk, dv = attention_bwd(datt) ; dq, dk = rope_bwd
 *   gWq += dq^T xn1 (k, v alike) ; dxn = dq Wq + dk Wk + dv Wv
 *   dres += rms_norm_bwd_x(dxn, x) ; gln1 += rms_norm_bwd_w(dxn, x) */
#include <math.h>

#include "llama_internal.h"

/* g[n_out, n_in] += dy[T, n_out]^T x[T, n_in], fp32 accumulation into the fp32 gradient. */
static Dataflow_Status weight_grad(Dataflow_Llama *m, int s, const void *dy, const void *x, float *g, int64_t T,
				   int64_t n_out, int64_t n_in)
{
	return dataflow_submit_matmul(m->handle, s, m->config.dtype, DATAFLOW_FP32, dy, x, g, g, n_out, n_in, T, 1, 0,
				      1.0f, 1.0f);
}

/* dx[T, n_in] (+)= dy[T, n_out] W[n_out, n_in]. */
static Dataflow_Status input_grad(Dataflow_Llama *m, int s, const void *dy, const void *W, void *dx, int64_t T,
				  int64_t n_out, int64_t n_in, int accumulate)
{
	DataflowDatatype d = m->config.dtype;
	return dataflow_submit_matmul(m->handle, s, d, d, dy, W, accumulate ? dx : NULL, dx, T, n_in, n_out, 0, 0, 1.0f,
				      accumulate ? 1.0f : 0.0f);
}

/* dres = dres + rms_norm_bwd_x(dxn) (or dres = rms_norm_bwd_x(dxn) when !add), gw += bwd_w. */
static Dataflow_Status norm_backward(Dataflow_Llama *m, int s, int64_t T, const void *x, const void *w,
				     const float *rstd, float *gw, int add)
{
	Dataflow_Handle *h = m->handle;
	DataflowDatatype d = m->config.dtype;
	int64_t H = m->config.hidden_size;
	Llama_Workspace *ws = &m->ws;
	TRY(dataflow_submit_rms_norm_bwd_x(h, s, d, T, H, ws->dxn, x, w, rstd, add ? ws->dtmp : ws->dres));
	if (add)
		TRY(dataflow_submit_add(h, s, d, T * H, 1.0f, ws->dres, 1.0f, ws->dtmp, ws->dres));
	TRY(dataflow_submit_rms_norm_bwd_w(h, s, d, DATAFLOW_FP32, T, H, ws->dxn, x, rstd, ws->rms_ws, ws->dw));
	return dataflow_submit_add(h, s, DATAFLOW_FP32, H, 1.0f, gw, 1.0f, ws->dw, gw);
}

static Dataflow_Status layer_backward(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b, int64_t l,
				      const Llama_Acts *a)
{
	Dataflow_Handle *h = m->handle;
	const Dataflow_Llama_Config *c = &m->config;
	DataflowDatatype d = c->dtype;
	Llama_Workspace *ws = &m->ws;
	int64_t T = b->num_tokens, H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t nq = c->num_heads, nkv = c->num_kv_heads, qd = nq * hd, kvd = nkv * hd;

	/* MLP */
	TRY(dataflow_submit_swiglu(h, s, d, T, F, a->gate, a->up, ws->act));
	TRY(weight_grad(m, s, ws->dres, ws->act, llama_g(m, l, LLAMA_DOWN), T, H, F));
	TRY(input_grad(m, s, ws->dres, llama_w(m, l, LLAMA_DOWN), ws->dact, T, H, F, 0));
	/* d_gate into dact (aliases d_out), d_up into act (aliases nothing else) */
	TRY(dataflow_submit_swiglu_bwd(h, s, d, T, F, ws->dact, a->gate, a->up, ws->dact, ws->act));
	TRY(weight_grad(m, s, ws->dact, a->xn2, llama_g(m, l, LLAMA_GATE), T, F, H));
	TRY(weight_grad(m, s, ws->act, a->xn2, llama_g(m, l, LLAMA_UP), T, F, H));
	TRY(input_grad(m, s, ws->dact, llama_w(m, l, LLAMA_GATE), ws->dxn, T, F, H, 0));
	TRY(input_grad(m, s, ws->act, llama_w(m, l, LLAMA_UP), ws->dxn, T, F, H, 1));
	TRY(norm_backward(m, s, T, a->hmid, llama_w(m, l, LLAMA_LN2), a->rstd2, llama_g(m, l, LLAMA_LN2), 1));

	/* attention */
	TRY(weight_grad(m, s, ws->dres, a->att, llama_g(m, l, LLAMA_O), T, H, qd));
	TRY(input_grad(m, s, ws->dres, llama_w(m, l, LLAMA_O), ws->datt, T, H, qd, 0));
	TRY(dataflow_submit_attention_bwd(h, s, d, ws->datt, a->q, a->k, a->v, a->att, a->lse, b->cu_seqlens, ws->dq,
					  ws->dk, ws->dv, ws->attn_ws, ws->attn_ws_bytes, T, b->num_docs, nq, nkv, hd,
					  1.0f / sqrtf((float)hd), 1));
	TRY(dataflow_submit_rope_bwd(h, s, d, T, nq, hd, b->positions, m->inv_freq, ws->dq, ws->dq));
	TRY(dataflow_submit_rope_bwd(h, s, d, T, nkv, hd, b->positions, m->inv_freq, ws->dk, ws->dk));
	TRY(weight_grad(m, s, ws->dq, a->xn1, llama_g(m, l, LLAMA_Q), T, qd, H));
	TRY(weight_grad(m, s, ws->dk, a->xn1, llama_g(m, l, LLAMA_K), T, kvd, H));
	TRY(weight_grad(m, s, ws->dv, a->xn1, llama_g(m, l, LLAMA_V), T, kvd, H));
	TRY(input_grad(m, s, ws->dq, llama_w(m, l, LLAMA_Q), ws->dxn, T, qd, H, 0));
	TRY(input_grad(m, s, ws->dk, llama_w(m, l, LLAMA_K), ws->dxn, T, kvd, H, 1));
	TRY(input_grad(m, s, ws->dv, llama_w(m, l, LLAMA_V), ws->dxn, T, kvd, H, 1));
	return norm_backward(m, s, T, llama_resid(m, l), llama_w(m, l, LLAMA_LN1), a->rstd1, llama_g(m, l, LLAMA_LN1),
			     1);
}

Dataflow_Status dataflow_llama_loss_backward(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b,
					     float *loss_out, int accumulate_grads, float loss_scale)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss_backward: model is required");
	if (!(loss_scale > 0) || !isfinite(loss_scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama loss_backward: loss_scale must be finite and > 0 (1 / labelled tokens for a "
					  "mean loss), got %g",
					  loss_scale);
	TRY(llama_check_batch(m, b, 1));
	TRY(llama_workspace_reserve(m, b->num_tokens));
	Dataflow_Handle *h = m->handle;
	const Dataflow_Llama_Config *c = &m->config;
	DataflowDatatype d = c->dtype;
	Llama_Workspace *ws = &m->ws;
	int64_t T = b->num_tokens, H = c->hidden_size, V = c->vocab_size, L = c->num_layers;
	if (!accumulate_grads)
		TRY(dataflow_llama_zero_grads(m, s));

	TRY(llama_forward_all(m, s, b, ws->logits, NULL, 0));
	TRY(dataflow_submit_cross_entropy(h, s, d, T, V, DATAFLOW_LLAMA_IGNORE_INDEX, loss_scale, ws->logits, b->labels,
					  ws->loss, ws->logits));
	if (loss_out)
		TRY(dataflow_submit_outbound_transfer(h, s, ws->host_loss, ws->loss, (uint64_t)T * 4));

	/* head: logits = xnf Wlm^T, xnf = rms_norm(resid[L]) */
	Llama_Block *head = &m->blocks[L + 1];
	const void *Wlm = c->tie_embeddings ? m->blocks[0].param : llama_at(head->param, m->lm_head_offset, d);
	float *gWlm = c->tie_embeddings ? m->blocks[0].grad : head->grad + m->lm_head_offset;
	TRY(weight_grad(m, s, ws->logits, ws->xnf, gWlm, T, V, H));
	TRY(input_grad(m, s, ws->logits, Wlm, ws->dxn, T, V, H, 0));
	TRY(norm_backward(m, s, T, llama_resid(m, L), llama_at(head->param, m->norm_offset, d), ws->rstdf,
			  head->grad + m->norm_offset, 0));

	for (int64_t l = L - 1; l >= 0; l--) {
		const Llama_Acts *a = &ws->acts[ws->recompute ? 0 : l];
		if (ws->recompute)
			TRY(llama_layer_forward(m, s, b, l, a, NULL));
		TRY(layer_backward(m, s, b, l, a));
	}
	TRY(dataflow_submit_embedding_bwd_w(h, s, DATAFLOW_INT32, d, DATAFLOW_FP32, T, H, V, b->tokens, ws->dres,
					    m->blocks[0].grad));
	if (loss_out) {
		TRY(dataflow_sync_stream(h, s));
		double sum = 0;
		for (int64_t t = 0; t < T; t++)
			sum += ws->host_loss[t];
		*loss_out = (float)(sum * loss_scale);
	}
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_loss(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b, float *loss_out,
				    float loss_scale)
{
	if (!m || !loss_out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss: model and loss_out are required");
	if (!(loss_scale > 0) || !isfinite(loss_scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss: loss_scale must be finite and > 0, got %g",
					  loss_scale);
	TRY(llama_check_batch(m, b, 1));
	TRY(llama_workspace_reserve(m, b->num_tokens));
	Dataflow_Handle *h = m->handle;
	Llama_Workspace *ws = &m->ws;
	int64_t T = b->num_tokens;
	TRY(llama_forward_all(m, s, b, ws->logits, NULL, 0));
	TRY(dataflow_submit_cross_entropy(h, s, m->config.dtype, T, m->config.vocab_size, DATAFLOW_LLAMA_IGNORE_INDEX,
					  loss_scale, ws->logits, b->labels, ws->loss, ws->logits));
	TRY(dataflow_submit_outbound_transfer(h, s, ws->host_loss, ws->loss, (uint64_t)T * 4));
	TRY(dataflow_sync_stream(h, s));
	double sum = 0;
	for (int64_t t = 0; t < T; t++)
		sum += ws->host_loss[t];
	*loss_out = (float)(sum * loss_scale);
	return DATAFLOW_OK;
}
