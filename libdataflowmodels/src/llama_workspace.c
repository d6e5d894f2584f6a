/* Activation workspace: one device allocation carved into the forward's saved activations and
 * the backward's scratch, sized for a token count and reused until a larger batch comes. */
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

/* Lays the workspace out (or only sizes it, when base is NULL). */
static int64_t layout(const Dataflow_Llama_Config *c, int64_t T, int recompute, void *base, Llama_Workspace *ws,
		      Llama_Acts *acts)
{
	int64_t es = llama_dtype_size(c->dtype);
	int64_t H = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int64_t hd = c->head_dim ? c->head_dim : H / c->num_heads;
	int64_t qd = c->num_heads * hd, kvd = c->num_kv_heads * hd, L = c->num_layers;
	Carver cv = {base, 0};
	Llama_Workspace w;
	memset(&w, 0, sizeof(w));
	w.resid = carve(&cv, (L + 1) * T * H * es);
	int64_t sets = recompute ? 1 : L;
	for (int64_t s = 0; s < sets; s++) {
		Llama_Acts a;
		a.xn1 = carve(&cv, T * H * es);
		a.q = carve(&cv, T * qd * es);
		a.k = carve(&cv, T * kvd * es);
		a.v = carve(&cv, T * kvd * es);
		a.att = carve(&cv, T * qd * es);
		a.hmid = carve(&cv, T * H * es);
		a.xn2 = carve(&cv, T * H * es);
		a.gate = carve(&cv, T * F * es);
		a.up = carve(&cv, T * F * es);
		a.rstd1 = carve(&cv, T * 4);
		a.rstd2 = carve(&cv, T * 4);
		a.lse = carve(&cv, c->num_heads * T * 4);
		if (acts)
			acts[s] = a;
	}
	w.xnf = carve(&cv, T * H * es);
	w.logits = carve(&cv, T * V * es);
	w.rstdf = carve(&cv, T * 4);
	w.loss = carve(&cv, T * 4);
	w.dres = carve(&cv, T * H * es);
	w.dtmp = carve(&cv, T * H * es);
	w.dxn = carve(&cv, T * H * es);
	w.dq = carve(&cv, T * qd * es);
	w.dk = carve(&cv, T * kvd * es);
	w.dv = carve(&cv, T * kvd * es);
	w.datt = carve(&cv, T * qd * es);
	w.act = carve(&cv, T * F * es);
	w.dact = carve(&cv, T * F * es);
	w.dw = carve(&cv, H * 4);
	w.rms_ws_bytes = dataflow_rms_norm_bwd_w_workspace_bytes(T, H);
	w.rms_ws = carve(&cv, w.rms_ws_bytes);
	/* attention's backward workspace for up to T documents (the most a batch can hold) */
	w.attn_ws_bytes = dataflow_attention_bwd_workspace_bytes(T, T, c->num_heads, c->num_kv_heads, hd);
	w.attn_ws = carve(&cv, w.attn_ws_bytes > 0 ? w.attn_ws_bytes : 0);
	if (ws)
		*ws = w;
	return cv.used;
}

int64_t dataflow_llama_workspace_bytes(const Dataflow_Llama_Config *config, int64_t max_tokens, int recompute)
{
	if (!config || max_tokens <= 0)
		return -1;
	return layout(config, max_tokens, recompute != 0, NULL, NULL, NULL);
}

void llama_workspace_free(Dataflow_Llama *m)
{
	Dataflow_Handle *h = m->handle;
	if (m->ws.base)
		dataflow_free_mem(h, m->ws.base);
	free(m->ws.acts);
	free(m->ws.host_loss);
	memset(&m->ws, 0, sizeof(m->ws));
}

Dataflow_Status llama_workspace_reserve(Dataflow_Llama *m, int64_t tokens)
{
	if (m->ws.base && m->ws.tokens >= tokens && m->ws.recompute == m->recompute)
		return DATAFLOW_OK;
	int64_t T = tokens > m->ws.tokens ? tokens : m->ws.tokens;
	Dataflow_Handle *h = m->handle;
	llama_workspace_free(m); /* stream-ordered free: queued work finishes first */
	int64_t bytes = layout(&m->config, T, m->recompute, NULL, NULL, NULL);
	int64_t sets = m->recompute ? 1 : m->config.num_layers;
	Llama_Acts *acts = calloc((size_t)sets, sizeof(Llama_Acts));
	float *host_loss = malloc((size_t)T * sizeof(float));
	void *base = NULL;
	Dataflow_Status st = acts && host_loss ? dataflow_alloc_mem(h, (uint64_t)bytes, &base)
					       : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
								    "llama workspace: host allocation failed");
	if (st != DATAFLOW_OK) {
		free(acts);
		free(host_loss);
		return st;
	}
	layout(&m->config, T, m->recompute, base, &m->ws, acts);
	m->ws.base = base;
	m->ws.acts = acts;
	m->ws.host_loss = host_loss;
	m->ws.tokens = T;
	m->ws.recompute = m->recompute;
	return DATAFLOW_OK;
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
