/* Llama forward: embedding, decoder layers, final norm, logits, as Hugging Face
 * LlamaForCausalLM computes them:
 *   h = embed[tokens]
 *   per layer:  xn1 = rms_norm(h) ; q, k, v = xn1 Wq^T, xn1 Wk^T, xn1 Wv^T
 *               q, k = rope(q), rope(k)  (positions restart per document)
 *               att = causal varlen GQA attention(q, k, v), scale 1 / sqrt(head_dim)
 *               hmid = h + att Wo^T ; xn2 = rms_norm(hmid)
 *               h = hmid + (silu(xn2 Wg^T) * xn2 Wu^T) Wd^T
 *   logits = rms_norm(h) Wlm^T   (Wlm = embed when tied)
 * The residual stream is in the model dtype, as HF keeps it. */
#include <math.h>

#include "llama_internal.h"

void *llama_resid(const Dataflow_Llama *m, int64_t layer)
{
	return llama_at(m->ws.resid, layer * m->ws.tokens * m->config.hidden_size, m->config.dtype);
}

/* out[T, n_out] = x[T, n_in] W[n_out, n_in]^T (+ residual[T, n_out] when given). */
static Dataflow_Status linear(Dataflow_Llama *m, int s, const void *x, const void *W, const void *residual, void *out,
			      int64_t T, int64_t n_out, int64_t n_in)
{
	DataflowDatatype d = m->config.dtype;
	return dataflow_submit_matmul(m->handle, s, d, d, x, W, residual, out, T, n_out, n_in, 0, 1, 1.0f,
				      residual ? 1.0f : 0.0f);
}

Dataflow_Status llama_layer_forward(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b, int64_t l,
				    const Llama_Acts *a, const Llama_KV_Step *kv)
{
	Dataflow_Handle *h = m->handle;
	const Dataflow_Llama_Config *c = &m->config;
	DataflowDatatype d = c->dtype;
	int64_t T = b->num_tokens, H = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
	int64_t nq = c->num_heads, nkv = c->num_kv_heads;
	void *x = llama_resid(m, l), *out = llama_resid(m, l + 1);
	/* with a cache, the new tokens' K and V rows go straight into it at row kv->past */
	void *k = a->k, *v = a->v;
	if (kv) {
		k = llama_at(kv->cache->layers[l], kv->past * nkv * hd, d);
		v = llama_at(kv->cache->layers[l], (kv->cache->max_tokens + kv->past) * nkv * hd, d);
	}

	TRY(dataflow_submit_rms_norm(h, s, d, T, H, c->rms_eps, x, llama_w(m, l, LLAMA_LN1), a->xn1, a->rstd1));
	TRY(linear(m, s, a->xn1, llama_w(m, l, LLAMA_Q), NULL, a->q, T, nq * hd, H));
	TRY(linear(m, s, a->xn1, llama_w(m, l, LLAMA_K), NULL, k, T, nkv * hd, H));
	TRY(linear(m, s, a->xn1, llama_w(m, l, LLAMA_V), NULL, v, T, nkv * hd, H));
	TRY(dataflow_submit_rope(h, s, d, T, nq, hd, b->positions, m->inv_freq, a->q, a->q));
	TRY(dataflow_submit_rope(h, s, d, T, nkv, hd, b->positions, m->inv_freq, k, k));
	float scale = 1.0f / sqrtf((float)hd);
	if (kv) {
		const void *K = kv->cache->layers[l], *V = llama_at(kv->cache->layers[l], kv->cache->max_tokens * nkv * hd, d);
		TRY(dataflow_submit_attention_kv(h, s, d, a->q, K, V, b->cu_seqlens, kv->cu_k, a->att, a->lse, T,
						 kv->past + T, 1, nq, nkv, hd, scale, 1));
	} else {
		TRY(dataflow_submit_attention(h, s, d, a->q, k, v, b->cu_seqlens, a->att, a->lse, T, b->num_docs, nq, nkv,
					      hd, scale, 1));
	}
	TRY(linear(m, s, a->att, llama_w(m, l, LLAMA_O), x, a->hmid, T, H, nq * hd));
	TRY(dataflow_submit_rms_norm(h, s, d, T, H, c->rms_eps, a->hmid, llama_w(m, l, LLAMA_LN2), a->xn2, a->rstd2));
	TRY(linear(m, s, a->xn2, llama_w(m, l, LLAMA_GATE), NULL, a->gate, T, F, H));
	TRY(linear(m, s, a->xn2, llama_w(m, l, LLAMA_UP), NULL, a->up, T, F, H));
	TRY(dataflow_submit_swiglu(h, s, d, T, F, a->gate, a->up, m->ws.act));
	return linear(m, s, m->ws.act, llama_w(m, l, LLAMA_DOWN), a->hmid, out, T, H, F);
}

Dataflow_Status llama_forward_all(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b, void *logits,
				  const Llama_KV_Step *kv, int64_t first)
{
	Dataflow_Handle *h = m->handle;
	const Dataflow_Llama_Config *c = &m->config;
	DataflowDatatype d = c->dtype;
	int64_t T = b->num_tokens, H = c->hidden_size, L = c->num_layers;
	TRY(dataflow_submit_embedding(h, s, DATAFLOW_INT32, d, T, H, c->vocab_size, b->tokens, m->blocks[0].param,
				      llama_resid(m, 0)));
	for (int64_t l = 0; l < L; l++)
		TRY(llama_layer_forward(m, s, b, l, &m->ws.acts[m->ws.recompute || kv ? 0 : l], kv));
	Llama_Block *head = &m->blocks[L + 1];
	TRY(dataflow_submit_rms_norm(h, s, d, T - first, H, c->rms_eps, llama_at(llama_resid(m, L), first * H, d),
				     llama_at(head->param, m->norm_offset, d), m->ws.xnf, m->ws.rstdf));
	const void *Wlm = c->tie_embeddings ? m->blocks[0].param : llama_at(head->param, m->lm_head_offset, d);
	return linear(m, s, m->ws.xnf, Wlm, NULL, logits, T - first, c->vocab_size, H);
}

Dataflow_Status dataflow_llama_forward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				       void *logits_out, int save_for_backward)
{
	(void)save_for_backward; /* the activations of the last forward stay in the workspace either way */
	if (!model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama forward: model is required");
	TRY(llama_check_batch(model, batch, 0));
	TRY(llama_workspace_reserve(model, batch->num_tokens));
	if (logits_out)
		TRY(dataflow_check_mem_range(model->handle, logits_out,
						   (uint64_t)(batch->num_tokens * model->config.vocab_size *
							      llama_dtype_size(model->config.dtype)),
						   "logits_out"));
	return llama_forward_all(model, stream, batch, logits_out ? logits_out : model->ws.logits, NULL, 0);
}
