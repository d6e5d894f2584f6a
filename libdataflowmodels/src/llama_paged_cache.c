/* Paged KV cache and the batched forward over it (models.h). The pool is one allocation;
 * pages are handed out from a free stack on the host and each live sequence keeps its page
 * list there. A step packs the sequences' new tokens into one batch (one document per
 * sequence), builds its tables on the host (positions, slots for the new K/V rows, page
 * tables, lengths, the rows of each sequence's last token) and uploads them with ONE inbound
 * transfer into a device copy of the same layout; then llama_forward_pass runs with the paged
 * pass (llama_layer.c: paged_kv_write, then paged_attention). */
#include <stdlib.h>
#include <string.h>

#include "llama_internal.h"

/* Keys per paged_attention split: long contexts are cut in splits of this many keys
 * (flash-decoding); a multiple of 64 (paged_attention's requirement). */
#define PAGED_SPLIT_SIZE 256

struct Dataflow_Llama_Paged_Cache {
	Dataflow_Llama *model;
	Dataflow_Handle *handle;
	int64_t num_pages, page_size, max_seqs, max_pages, max_batch_tokens;
	void *pool;                 /* [L][2][num_pages][page_size][kv_heads][head_dim] */
	int32_t *free_stack;        /* host: the free pages, free_top of them */
	int64_t free_top;
	int32_t *seq_pages;         /* host [max_seqs][max_pages] */
	int64_t *seq_len;           /* host [max_seqs]; -1: not alive */
	int32_t *host_tables;       /* host staging of one step's tables (the layout below) */
	int32_t *tables;            /* device copy */
	void *attn_ws;              /* paged_attention workspace */
	int64_t attn_ws_bytes;
	void *head_x;               /* [max_seqs, hidden] */
};

/* The step tables, int32 offsets into host_tables / tables. */
typedef struct {
	int64_t tokens, positions, slots, cu, seq_lens, last_rows, page_table, total;
} Step_Layout;

static Step_Layout step_layout(int64_t max_batch_tokens, int64_t max_seqs, int64_t max_pages)
{
	Step_Layout o;
	o.tokens = 0;
	o.positions = max_batch_tokens;
	o.slots = 2 * max_batch_tokens;
	o.cu = 3 * max_batch_tokens;
	o.seq_lens = o.cu + max_seqs + 1;
	o.last_rows = o.seq_lens + max_seqs;
	o.page_table = o.last_rows + max_seqs;
	o.total = o.page_table + max_seqs * max_pages;
	return o;
}

static int64_t layer_elems(const Dataflow_Llama_Config *c, int64_t num_pages, int64_t page_size)
{
	return num_pages * page_size * c->num_kv_heads * c->head_dim;
}

int64_t dataflow_llama_paged_cache_pool_bytes(const Dataflow_Llama_Config *config, int64_t num_pages,
					      int64_t page_size)
{
	if (!config || num_pages <= 0 || page_size <= 0 || num_pages > INT32_MAX / page_size)
		return -1;
	return config->num_layers * 2 * layer_elems(config, num_pages, page_size) * llama_dtype_size(config->dtype);
}

void dataflow_llama_paged_cache_destroy(Dataflow_Llama_Paged_Cache *cache)
{
	if (!cache)
		return;
	Dataflow_Handle *h = cache->handle;
	dataflow_sync_handle(h);
	void *dev[] = {cache->pool, cache->tables, cache->attn_ws, cache->head_x};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		if (dev[i])
			dataflow_free_mem(h, dev[i]);
	free(cache->free_stack);
	free(cache->seq_pages);
	free(cache->seq_len);
	free(cache->host_tables);
	free(cache);
}

static Dataflow_Status alloc_dev(Dataflow_Handle *h, int64_t bytes, void **out)
{
	return dataflow_alloc_mem(h, (uint64_t)bytes, out);
}

Dataflow_Status dataflow_llama_paged_cache_create(Dataflow_Llama *model, int64_t num_pages, int64_t page_size,
						  int64_t max_seqs, int64_t max_seq_tokens, int64_t max_batch_tokens,
						  Dataflow_Llama_Paged_Cache **cache)
{
	if (!model || !cache)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama paged_cache_create: model and cache are required");
	*cache = NULL;
	const Dataflow_Llama_Config *c = model->config;
	const struct {
		const char *name;
		int64_t value, max;
	} limits[] = {{"num_pages", num_pages, INT32_MAX},
		      {"page_size", page_size, 1 << 20},
		      {"max_seqs", max_seqs, 1 << 20},
		      {"max_seq_tokens", max_seq_tokens, INT32_MAX},
		      {"max_batch_tokens", max_batch_tokens, INT32_MAX}};
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
		if (limits[i].value < 1 || limits[i].value > limits[i].max)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "llama paged_cache_create: %s must be in [1, %lld], got %lld", limits[i].name,
						  (long long)limits[i].max, (long long)limits[i].value);
	if (dataflow_llama_paged_cache_pool_bytes(c, num_pages, page_size) < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama paged_cache_create: num_pages * page_size must be < 2^31, got %lld * %lld",
					  (long long)num_pages, (long long)page_size);
	int64_t max_pages = (max_seq_tokens + page_size - 1) / page_size;
	Step_Layout o = step_layout(max_batch_tokens, max_seqs, max_pages);
	Dataflow_Llama_Paged_Cache *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama paged_cache_create: host allocation failed");
	*pc = (Dataflow_Llama_Paged_Cache){.model = model, .handle = model->handle, .num_pages = num_pages,
					   .page_size = page_size, .max_seqs = max_seqs, .max_pages = max_pages,
					   .max_batch_tokens = max_batch_tokens};
	pc->free_stack = malloc((size_t)num_pages * sizeof(int32_t));
	pc->seq_pages = calloc((size_t)(max_seqs * max_pages), sizeof(int32_t)); /* unused entries are uploaded, never read */
	pc->seq_len = malloc((size_t)max_seqs * sizeof(int64_t));
	pc->host_tables = calloc((size_t)o.total, sizeof(int32_t));
	if (!pc->free_stack || !pc->seq_pages || !pc->seq_len || !pc->host_tables) {
		dataflow_llama_paged_cache_destroy(pc);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama paged_cache_create: host allocation failed");
	}
	for (int64_t p = 0; p < num_pages; p++) /* page 0 on top */
		pc->free_stack[p] = (int32_t)(num_pages - 1 - p);
	pc->free_top = num_pages;
	for (int64_t s = 0; s < max_seqs; s++)
		pc->seq_len[s] = -1;
	pc->attn_ws_bytes = dataflow_paged_attention_workspace_bytes(max_batch_tokens, c->num_heads, c->head_dim,
								     max_pages, page_size, PAGED_SPLIT_SIZE);
	Dataflow_Handle *h = model->handle;
	Dataflow_Status st = pc->attn_ws_bytes < 0 ? dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
									"llama paged_cache_create: sizes overflow")
						   : DATAFLOW_OK;
	if (st == DATAFLOW_OK)
		st = alloc_dev(h, dataflow_llama_paged_cache_pool_bytes(c, num_pages, page_size), &pc->pool);
	if (st == DATAFLOW_OK)
		st = alloc_dev(h, o.total * 4, (void **)&pc->tables);
	if (st == DATAFLOW_OK)
		st = alloc_dev(h, pc->attn_ws_bytes, &pc->attn_ws);
	if (st == DATAFLOW_OK)
		st = alloc_dev(h, max_seqs * c->hidden_size * llama_dtype_size(c->dtype), &pc->head_x);
	if (st == DATAFLOW_OK)
		st = llama_workspace_reserve(model, max_batch_tokens);
	if (st != DATAFLOW_OK) {
		dataflow_llama_paged_cache_destroy(pc);
		return st;
	}
	*cache = pc;
	return DATAFLOW_OK;
}

static int alive(const Dataflow_Llama_Paged_Cache *c, int64_t seq)
{
	return seq >= 0 && seq < c->max_seqs && c->seq_len[seq] >= 0;
}

Dataflow_Status dataflow_llama_paged_cache_add_sequence(Dataflow_Llama_Paged_Cache *cache, int64_t *seq)
{
	if (!cache || !seq)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama paged_cache_add_sequence: cache and seq are required");
	for (int64_t s = 0; s < cache->max_seqs; s++)
		if (cache->seq_len[s] < 0) {
			cache->seq_len[s] = 0;
			*seq = s;
			return DATAFLOW_OK;
		}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				  "llama paged_cache_add_sequence: all %lld sequences (max_seqs) are alive",
				  (long long)cache->max_seqs);
}

static int64_t pages_for(const Dataflow_Llama_Paged_Cache *c, int64_t tokens)
{
	return (tokens + c->page_size - 1) / c->page_size;
}

Dataflow_Status dataflow_llama_paged_cache_free_sequence(Dataflow_Llama_Paged_Cache *cache, int64_t seq)
{
	if (!cache || !alive(cache, seq))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama paged_cache_free_sequence: seq %lld is not alive",
					  (long long)seq);
	for (int64_t p = pages_for(cache, cache->seq_len[seq]); p-- > 0;)
		cache->free_stack[cache->free_top++] = cache->seq_pages[seq * cache->max_pages + p];
	cache->seq_len[seq] = -1;
	return DATAFLOW_OK;
}

int64_t dataflow_llama_paged_cache_length(const Dataflow_Llama_Paged_Cache *cache, int64_t seq)
{
	return cache && alive(cache, seq) ? cache->seq_len[seq] : -1;
}

int64_t dataflow_llama_paged_cache_free_pages(const Dataflow_Llama_Paged_Cache *cache)
{
	return cache ? cache->free_top : -1;
}

/* Checks a step against the limits and the pool (nothing changes on failure); returns the
 * total of new tokens in *total. */
static Dataflow_Status check_step(const Dataflow_Llama_Paged_Cache *c, int64_t num_seqs, const int64_t *seqs,
				  const int64_t *num_new, int64_t *total)
{
	const char *op = "llama forward_paged";
	if (num_seqs < 1 || num_seqs > c->max_seqs)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: num_seqs must be in [1, %lld], got %lld", op,
					  (long long)c->max_seqs, (long long)num_seqs);
	int64_t pages = 0;
	*total = 0;
	for (int64_t i = 0; i < num_seqs; i++) {
		int64_t s = seqs[i];
		if (!alive(c, s))
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: seqs[%lld] = %lld is not a live sequence",
						  op, (long long)i, (long long)s);
		for (int64_t j = 0; j < i; j++)
			if (seqs[j] == s)
				return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
							  "%s: seqs[%lld] and seqs[%lld] are both sequence %lld", op,
							  (long long)j, (long long)i, (long long)s);
		if (num_new[i] < 1 || num_new[i] > c->max_pages * c->page_size - c->seq_len[s])
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "%s: num_new[%lld] = %lld must be in [1, %lld]: sequence %lld holds %lld "
						  "of max_seq_tokens %lld",
						  op, (long long)i, (long long)num_new[i],
						  (long long)(c->max_pages * c->page_size - c->seq_len[s]), (long long)s,
						  (long long)c->seq_len[s], (long long)(c->max_pages * c->page_size));
		*total += num_new[i];
		pages += pages_for(c, c->seq_len[s] + num_new[i]) - pages_for(c, c->seq_len[s]);
	}
	if (*total > c->max_batch_tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: %lld new tokens exceed max_batch_tokens %lld", op, (long long)*total,
					  (long long)c->max_batch_tokens);
	if (pages > c->free_top)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "%s: the KV page pool is exhausted: the step needs %lld new pages of %lld "
					  "tokens, %lld of %lld are free (free a sequence or create a larger pool)",
					  op, (long long)pages, (long long)c->page_size, (long long)c->free_top,
					  (long long)c->num_pages);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_forward_paged(Dataflow_Llama *model, int stream, Dataflow_Llama_Paged_Cache *cache,
					     int64_t num_seqs, const int64_t *seqs, const int64_t *num_new,
					     const int32_t *tokens, void *logits_out)
{
	if (!model || !cache || !seqs || !num_new || !tokens || !logits_out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama forward_paged: model, cache, seqs, num_new, tokens and logits_out are required");
	if (cache->model != model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama forward_paged: the cache belongs to another model");
	Dataflow_Handle *h = model->handle;
	const Dataflow_Llama_Config *c = model->config;
	int64_t total = 0;
	TRY(check_step(cache, num_seqs, seqs, num_new, &total));
	TRY(dataflow_check_mem_range(h, logits_out, (uint64_t)(num_seqs * c->vocab_size * llama_dtype_size(c->dtype)),
				     "logits_out"));
	TRY(dataflow_sync_stream(h, stream)); /* the last step's upload has read host_tables */
	Step_Layout o = step_layout(cache->max_batch_tokens, cache->max_seqs, cache->max_pages);
	int32_t *t = cache->host_tables;
	memcpy(t + o.tokens, tokens, (size_t)total * sizeof(int32_t));
	int64_t row = 0;
	t[o.cu] = 0;
	for (int64_t i = 0; i < num_seqs; i++) {
		int64_t s = seqs[i], past = cache->seq_len[s], len = past + num_new[i];
		int32_t *pages = cache->seq_pages + s * cache->max_pages;
		for (int64_t p = pages_for(cache, past); p < pages_for(cache, len); p++)
			pages[p] = cache->free_stack[--cache->free_top];
		for (int64_t j = past; j < len; j++, row++) {
			t[o.positions + row] = (int32_t)j;
			t[o.slots + row] = (int32_t)(pages[j / cache->page_size] * cache->page_size + j % cache->page_size);
		}
		t[o.cu + i + 1] = (int32_t)row;
		t[o.seq_lens + i] = (int32_t)len;
		t[o.last_rows + i] = (int32_t)(row - 1);
		memcpy(t + o.page_table + i * cache->max_pages, pages, (size_t)cache->max_pages * sizeof(int32_t));
		cache->seq_len[s] = len;
	}
	Dataflow_Status st = dataflow_submit_inbound_transfer(h, stream, cache->tables, t, (uint64_t)o.total * 4);
	if (st != DATAFLOW_OK)
		return st;
	int32_t *d = cache->tables;
	Dataflow_Llama_Batch batch = {.num_tokens = total, .num_docs = num_seqs, .tokens = d + o.tokens,
				      .cu_seqlens = d + o.cu, .positions = d + o.positions};
	Llama_Paged_Pass pass = {
		.kv = {.k_pages = cache->pool, .slot_mapping = d + o.slots, .page_table = d + o.page_table,
		       .seq_lens = d + o.seq_lens, .num_pages = cache->num_pages, .page_size = cache->page_size,
		       .max_pages = cache->max_pages, .split_size = PAGED_SPLIT_SIZE, .workspace = cache->attn_ws,
		       .workspace_bytes = cache->attn_ws_bytes},
		.layer_elems = layer_elems(c, cache->num_pages, cache->page_size),
		.last_rows = d + o.last_rows,
		.head_x = cache->head_x};
	return llama_forward_pass(model, stream, &batch, NULL, &pass, logits_out, 0, 0.0f);
}
