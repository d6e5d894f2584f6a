/* The resident model's forward activations: one device allocation carved into the residual
 * stream, one layer's activations (every layer's forward rewrites them: nothing is kept for a
 * backward, which is the executor's), the head's, the token losses and the per-call
 * workspace; sized for a token count and reused until a larger batch comes. */
#include <string.h>

#include "llama_internal.h"

/* The level the forward lays a block's activations out at: all of them in `saved` (the
 * layers share one such region). */
#define FORWARD_LEVEL DATAFLOW_SAVE_ALL

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

/* Lays the workspace out (or only sizes it, when base is NULL). */
static int64_t layout(const Dataflow_Blocked_Model *bm, int64_t T, void *base, Llama_Workspace *ws)
{
	const Dataflow_Llama_Config *c = dataflow_blocked_model_config(bm);
	int64_t es = llama_dtype_size(c->dtype), H = c->hidden_size, L = c->num_layers;
	int64_t layer_acts, head_acts;
	dataflow_block_acts_bytes(bm, 1, FORWARD_LEVEL, T, &layer_acts, NULL, NULL);
	dataflow_block_acts_bytes(bm, (int)L + 1, FORWARD_LEVEL, T, &head_acts, NULL, NULL);
	Carver cv = {base, 0};
	Llama_Workspace w;
	memset(&w, 0, sizeof(w));
	w.resid = carve(&cv, (L + 1) * T * H * es);
	w.layer_acts = carve(&cv, layer_acts);
	w.head_acts = carve(&cv, head_acts);
	w.token_losses = carve(&cv, T * 4);
	w.scratch = carve(&cv, dataflow_blocked_model_workspace_bytes(bm, T));
	if (ws)
		*ws = w;
	return cv.used;
}

void llama_workspace_free(Dataflow_Llama *m)
{
	if (m->ws.base)
		dataflow_free_mem(m->handle, m->ws.base);
	memset(&m->ws, 0, sizeof(m->ws));
}

Dataflow_Status llama_workspace_reserve(Dataflow_Llama *m, int64_t tokens)
{
	if (m->ws.base && m->ws.tokens >= tokens)
		return DATAFLOW_OK;
	llama_workspace_free(m); /* stream-ordered free: queued work finishes first */
	m->last_tokens = 0;      /* the token losses went with it */
	void *base = NULL;
	TRY(dataflow_alloc_mem(m->handle, (uint64_t)layout(m->bm, tokens, NULL, NULL), &base));
	layout(m->bm, tokens, base, &m->ws);
	m->ws.base = base;
	m->ws.tokens = tokens;
	return DATAFLOW_OK;
}

Dataflow_Block_Args llama_block_args(const Dataflow_Llama *m, const Dataflow_Llama_Batch *batch, int block)
{
	const Llama_Workspace *ws = &m->ws;
	int L = (int)m->config->num_layers;
	Dataflow_Block_Args a = {.batch = batch, .level = FORWARD_LEVEL, .workspace = ws->scratch};
	if (block == 0) {
		a.y = llama_resid(m, 0);
	} else if (block <= L) {
		a.x = llama_resid(m, block - 1);
		a.y = llama_resid(m, block);
		a.saved = ws->layer_acts;
	} else {
		a.x = llama_resid(m, L);
		a.saved = ws->head_acts;
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
