/* The resident model's activations: one device allocation carved into the residual stream,
 * every layer's saved activations at the model's save level, one set of recomputed
 * activations, the head's, one dacts, two gradient buffers, the token losses and the per-call
 * workspace; sized for a token count and reused until a larger batch comes. */
#include <stdlib.h>
#include <string.h>

#include "llama_internal.h"

typedef struct {
	char *base;   /* NULL while sizing */
	int64_t used; /* bytes */
} Carver;

static void *carve(Carver *c, int64_t bytes)
{
	int64_t at = (c->used + 63) / 64 * 64;
	c->used = at + bytes;
	return c->base ? c->base + at : NULL;
}

/* Lays the workspace out (or only sizes it, when base is NULL); saved: host [L] or NULL. */
static int64_t layout(const Dataflow_Blocked_Model *bm, int64_t T, Dataflow_Save_Level level, void *base,
		      Llama_Workspace *ws, void **saved)
{
	const Dataflow_Llama_Config *c = dataflow_blocked_model_config(bm);
	int64_t es = llama_dtype_size(c->dtype), H = c->hidden_size, L = c->num_layers;
	int64_t layer_saved, layer_recomputed, layer_dacts, head_saved, head_dacts;
	dataflow_block_acts_bytes(bm, 1, level, T, &layer_saved, &layer_recomputed, &layer_dacts);
	dataflow_block_acts_bytes(bm, (int)L + 1, level, T, &head_saved, NULL, &head_dacts);
	Carver cv = {base, 0};
	Llama_Workspace w;
	memset(&w, 0, sizeof(w));
	w.resid = carve(&cv, (L + 1) * T * H * es);
	for (int64_t l = 0; l < L; l++) {
		void *p = carve(&cv, layer_saved);
		if (saved)
			saved[l] = p;
	}
	w.recomputed = carve(&cv, layer_recomputed);
	w.head_saved = carve(&cv, head_saved);
	w.dacts = carve(&cv, layer_dacts > head_dacts ? layer_dacts : head_dacts);
	w.dres[0] = carve(&cv, T * H * es);
	w.dres[1] = carve(&cv, T * H * es);
	w.token_losses = carve(&cv, T * 4);
	w.scratch = carve(&cv, dataflow_blocked_model_workspace_bytes(bm, T));
	if (ws)
		*ws = w;
	return cv.used;
}

int64_t dataflow_llama_workspace_bytes(const Dataflow_Llama_Config *config, int64_t max_tokens,
				       Dataflow_Save_Level level)
{
	if (!config || max_tokens <= 0 || max_tokens > ((int64_t)1 << 31) || (int)level < 0 ||
	    level >= DATAFLOW_NUM_SAVE_LEVELS)
		return -1;
	Dataflow_Blocked_Model definition = {0};
	if (llama_define(&definition, config) != DATAFLOW_OK)
		return -1;
	return layout(&definition, max_tokens, level, NULL, NULL, NULL);
}

void llama_workspace_free(Dataflow_Llama *m)
{
	if (m->ws.base)
		dataflow_free_mem(m->handle, m->ws.base);
	free(m->ws.saved);
	memset(&m->ws, 0, sizeof(m->ws));
}

Dataflow_Status llama_workspace_reserve(Dataflow_Llama *m, int64_t tokens)
{
	if (m->ws.base && m->ws.tokens >= tokens && m->ws.level == m->save_level)
		return DATAFLOW_OK;
	int64_t T = tokens > m->ws.tokens ? tokens : m->ws.tokens;
	llama_workspace_free(m); /* stream-ordered free: queued work finishes first */
	m->last_tokens = 0;      /* the token losses went with it */
	int64_t bytes = layout(m->bm, T, m->save_level, NULL, NULL, NULL);
	void **saved = calloc((size_t)m->config->num_layers, sizeof(void *));
	void *base = NULL;
	Dataflow_Status st = saved ? dataflow_alloc_mem(m->handle, (uint64_t)bytes, &base)
				   : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama workspace: host allocation failed");
	if (st != DATAFLOW_OK) {
		free(saved);
		return st;
	}
	layout(m->bm, T, m->save_level, base, &m->ws, saved);
	m->ws.base = base;
	m->ws.saved = saved;
	m->ws.tokens = T;
	m->ws.level = m->save_level;
	return DATAFLOW_OK;
}

Dataflow_Block_Args llama_block_args(const Dataflow_Llama *m, const Dataflow_Llama_Batch *batch, int block)
{
	const Llama_Workspace *ws = &m->ws;
	int L = (int)m->config->num_layers;
	Dataflow_Block_Args a = {.batch = batch, .level = ws->level, .dacts = ws->dacts, .workspace = ws->scratch};
	if (block == 0) {
		a.y = llama_resid(m, 0);
	} else if (block <= L) {
		a.x = llama_resid(m, block - 1);
		a.y = llama_resid(m, block);
		a.saved = ws->saved[block - 1];
		a.recomputed = ws->recomputed;
	} else {
		a.x = llama_resid(m, L);
		a.saved = ws->head_saved;
		a.tied = m->config->tie_embeddings ? &m->blocks[0] : NULL;
	}
	return a;
}

Dataflow_Status llama_check_batch(const Dataflow_Llama *m, const Dataflow_Llama_Batch *b, int need_labels)
{
	if (!b)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama batch: batch is required");
	if (b->num_tokens <= 0 || b->num_tokens > ((int64_t)1 << 31))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama batch: num_tokens must be in [1, 2^31], got %lld",
					  (long long)b->num_tokens);
	if (b->num_docs <= 0 || b->num_docs > b->num_tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama batch: num_docs must be in [1, num_tokens = %lld], got %lld",
					  (long long)b->num_tokens, (long long)b->num_docs);
	Dataflow_Handle *h = m->handle;
	const struct {
		const char *name;
		const void *ptr;
		int64_t n;
	} arrays[] = {{"tokens", b->tokens, b->num_tokens},
		      {"cu_seqlens", b->cu_seqlens, b->num_docs + 1},
		      {"positions", b->positions, b->num_tokens},
		      {"labels", b->labels, b->num_tokens}};
	for (int i = 0; i < 4; i++) {
		if (i == 3 && !need_labels)
			break;
		if (!arrays[i].ptr)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama batch: %s is NULL", arrays[i].name);
		TRY(dataflow_check_mem_range(h, arrays[i].ptr, (uint64_t)arrays[i].n * 4, arrays[i].name));
	}
	return DATAFLOW_OK;
}
