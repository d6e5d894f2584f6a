/* The resident model's forward: the embedding, layer and head blocks in order over the
 * resident workspace (the residual stream in the model dtype, as Hugging Face keeps it). */
#include "llama_internal.h"

static Dataflow_Status forward_block(Dataflow_Llama *m, int b, int s, const Dataflow_Block_Args *a)
{
	return dataflow_block_forward(m->bm, b, s, &m->blocks[b], a);
}

Dataflow_Status llama_forward_pass(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b,
				   const Dataflow_Llama_KV_Cache *cache, const Llama_Paged_Pass *paged, void *logits,
				   int64_t first_row, float loss_scale)
{
	int L = (int)m->config->num_layers;
	Dataflow_Block_Args a = llama_block_args(m, b, 0);
	TRY(forward_block(m, 0, s, &a));
	for (int l = 0; l < L; l++) {
		a = llama_block_args(m, b, 1 + l);
		Dataflow_Block_KV kv;
		if (cache) {
			int64_t kvd = m->config->num_kv_heads * m->config->head_dim, past = cache->length;
			kv = (Dataflow_Block_KV){.k = cache->layers[l],
						 .v = llama_at(cache->layers[l], cache->max_tokens * kvd, m->config->dtype),
						 .past = past,
						 .cu_k = cache->tables + cache->max_tokens + 2 * (past + b->num_tokens)};
			a.kv = &kv;
		}
		Dataflow_Block_Paged_KV pkv;
		if (paged) {
			pkv = paged->kv;
			pkv.k_pages = llama_at(paged->kv.k_pages, 2 * l * paged->layer_elems, m->config->dtype);
			pkv.v_pages = llama_at(paged->kv.k_pages, (2 * l + 1) * paged->layer_elems, m->config->dtype);
			a.paged = &pkv;
		}
		TRY(forward_block(m, 1 + l, s, &a));
	}
	if (paged) { /* the head over each sequence's last token: its rows gathered (an embedding) */
		const Dataflow_Llama_Config *c = m->config;
		Dataflow_Llama_Batch rows = {.num_tokens = b->num_docs, .num_docs = 1};
		TRY(dataflow_submit_embedding(m->handle, s, DATAFLOW_INT32, c->dtype, b->num_docs, c->hidden_size,
					      b->num_tokens, paged->last_rows, llama_resid(m, L), paged->head_x));
		a = llama_block_args(m, &rows, L + 1);
		a.x = paged->head_x;
		a.y = logits;
		return forward_block(m, L + 1, s, &a);
	}
	/* the head over rows [first_row, T): a batch of those rows (the head reads no positions) */
	Dataflow_Llama_Batch rows = *b;
	rows.num_tokens -= first_row;
	rows.num_docs = 1;
	if (b->labels)
		rows.labels = b->labels + first_row;
	a = llama_block_args(m, first_row ? &rows : b, L + 1);
	a.x = llama_at(a.x, first_row * m->config->hidden_size, m->config->dtype);
	a.y = logits;
	if (loss_scale > 0) {
		a.token_losses = m->ws.token_losses;
		a.loss_scale = loss_scale;
		m->last_tokens = b->num_tokens;
	}
	return forward_block(m, L + 1, s, &a);
}

Dataflow_Status dataflow_llama_forward(Dataflow_Llama *model, int stream, const Dataflow_Llama_Batch *batch,
				       void *logits_out)
{
	if (!model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama forward: model is required");
	TRY(llama_check_batch(model, batch, 0));
	TRY(llama_workspace_reserve(model, batch->num_tokens));
	if (logits_out)
		TRY(dataflow_check_mem_range(model->handle, logits_out,
					     (uint64_t)(batch->num_tokens * model->config->vocab_size *
							llama_dtype_size(model->config->dtype)),
					     "logits_out"));
	return llama_forward_pass(model, stream, batch, NULL, NULL, logits_out, 0, 0.0f);
}

Dataflow_Status dataflow_llama_loss(Dataflow_Llama *m, int s, const Dataflow_Llama_Batch *b)
{
	if (!m)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama loss: model is required");
	TRY(llama_check_batch(m, b, 1));
	TRY(llama_workspace_reserve(m, b->num_tokens));
	return llama_forward_pass(m, s, b, NULL, NULL, NULL, 0, 1.0f);
}

Dataflow_Status dataflow_llama_outputs(const Dataflow_Llama *m, Dataflow_Llama_Outputs *out)
{
	if (!m || !out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama outputs: model and outputs are required");
	out->token_losses = m->last_tokens ? m->ws.token_losses : NULL;
	out->num_tokens = m->last_tokens;
	return DATAFLOW_OK;
}
