/* KV cache and the cached forward: incremental decoding of one sequence. The new tokens run
 * through the layers as a one-document batch whose keys and values are written into the cache
 * (after RoPE) and whose attention reads the whole cache (attention_kv, bottom-right causal).
 * Positions and cu_seqlens come from device tables built once at create:
 *   iota [max_tokens]              positions of tokens past.. = iota + past
 *   pairs {0, m}, m = 0..max_tokens  cu_seqlens_q = pairs[n], cu_seqlens_k = pairs[past + n]
 * so a step needs no host-to-device copy and no allocation. Destroying a cache needs only its
 * handle, so it may outlive its model (e.g. garbage collection order). */
#include <stdlib.h>

#include "llama_internal.h"

static int64_t layer_numel(const Dataflow_Llama_Config *c, int64_t max_tokens)
{
	int64_t hd = c->head_dim ? c->head_dim : c->hidden_size / c->num_heads;
	return 2 * max_tokens * c->num_kv_heads * hd;
}

static int64_t tables_numel(int64_t max_tokens)
{
	return max_tokens + 2 * (max_tokens + 1);
}

int64_t dataflow_llama_kv_cache_bytes(const Dataflow_Llama_Config *config, int64_t max_tokens)
{
	if (!config || max_tokens <= 0 || max_tokens >= INT32_MAX || config->num_heads <= 0)
		return -1;
	return config->num_layers * layer_numel(config, max_tokens) * llama_dtype_size(config->dtype) +
	       tables_numel(max_tokens) * 4;
}

void dataflow_llama_kv_cache_destroy(Dataflow_Llama_KV_Cache *cache)
{
	if (!cache)
		return;
	Dataflow_Handle *h = cache->handle;
	dataflow_sync_handle(h);
	for (int64_t l = 0; cache->layers && l < cache->num_layers; l++)
		if (cache->layers[l])
			dataflow_free_mem(h, cache->layers[l]);
	if (cache->tables)
		dataflow_free_mem(h, cache->tables);
	free(cache->layers);
	free(cache);
}

Dataflow_Status dataflow_llama_kv_cache_create(Dataflow_Llama *model, int64_t max_tokens,
					       Dataflow_Llama_KV_Cache **cache)
{
	if (!model || !cache)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama kv_cache_create: model and cache are required");
	*cache = NULL;
	if (max_tokens <= 0 || max_tokens >= INT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama kv_cache_create: max_tokens must be in [1, 2^31 - 1), got %lld",
					  (long long)max_tokens);
	Dataflow_Handle *h = model->handle;
	const Dataflow_Llama_Config *c = model->config;
	Dataflow_Llama_KV_Cache *kc = calloc(1, sizeof(*kc));
	int32_t *host = malloc((size_t)tables_numel(max_tokens) * sizeof(int32_t));
	if (kc)
		kc->layers = calloc((size_t)c->num_layers, sizeof(void *));
	if (!kc || !kc->layers || !host) {
		free(host);
		if (kc)
			free(kc->layers);
		free(kc);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "llama kv_cache_create: host allocation failed");
	}
	kc->model = model;
	kc->handle = h;
	kc->num_layers = c->num_layers;
	kc->max_tokens = max_tokens;
	Dataflow_Status st = DATAFLOW_OK;
	uint64_t layer_bytes = (uint64_t)(layer_numel(c, max_tokens) * llama_dtype_size(c->dtype));
	for (int64_t l = 0; l < c->num_layers && st == DATAFLOW_OK; l++)
		st = dataflow_alloc_mem(h, layer_bytes, &kc->layers[l]);
	if (st == DATAFLOW_OK)
		st = dataflow_alloc_mem(h, (uint64_t)tables_numel(max_tokens) * 4, (void **)&kc->tables);
	if (st == DATAFLOW_OK) {
		for (int64_t i = 0; i < max_tokens; i++)
			host[i] = (int32_t)i;
		for (int64_t m = 0; m <= max_tokens; m++) {
			host[max_tokens + 2 * m] = 0;
			host[max_tokens + 2 * m + 1] = (int32_t)m;
		}
		st = dataflow_submit_inbound_transfer(h, 0, kc->tables, host, (uint64_t)tables_numel(max_tokens) * 4);
		if (st == DATAFLOW_OK)
			st = dataflow_sync_stream(h, 0); /* host is freed below */
	}
	free(host);
	if (st != DATAFLOW_OK) {
		dataflow_llama_kv_cache_destroy(kc);
		return st;
	}
	*cache = kc;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_llama_kv_cache_reset(Dataflow_Llama_KV_Cache *cache)
{
	if (!cache)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "llama kv_cache_reset: cache is NULL");
	cache->length = 0;
	return DATAFLOW_OK;
}

int64_t dataflow_llama_kv_cache_length(const Dataflow_Llama_KV_Cache *cache)
{
	return cache ? cache->length : -1;
}

int64_t dataflow_llama_kv_cache_capacity(const Dataflow_Llama_KV_Cache *cache)
{
	return cache ? cache->max_tokens : -1;
}

Dataflow_Status dataflow_llama_forward_cached(Dataflow_Llama *model, int stream, Dataflow_Llama_KV_Cache *cache,
					      const int32_t *tokens, int64_t num_tokens, void *logits_out,
					      int all_logits)
{
	if (!model || !cache || !tokens)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama forward_cached: model, cache and tokens are required");
	if (cache->model != model)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama forward_cached: the cache belongs to another model");
	if (num_tokens <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama forward_cached: num_tokens must be >= 1, got %lld", (long long)num_tokens);
	if (num_tokens > cache->max_tokens - cache->length)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "llama forward_cached: KV cache overflow: %lld cached + %lld new tokens exceed "
					  "its capacity of %lld tokens",
					  (long long)cache->length, (long long)num_tokens, (long long)cache->max_tokens);
	Dataflow_Handle *h = model->handle;
	int64_t V = model->config->vocab_size, rows = all_logits ? num_tokens : 1;
	TRY(dataflow_check_mem_range(h, tokens, (uint64_t)num_tokens * 4, "tokens"));
	if (logits_out)
		TRY(dataflow_check_mem_range(h, logits_out, (uint64_t)(rows * V * llama_dtype_size(model->config->dtype)),
				       "logits_out"));
	TRY(llama_workspace_reserve(model, num_tokens));
	int64_t past = cache->length;
	int32_t *pairs = cache->tables + cache->max_tokens;
	Dataflow_Llama_Batch batch = {num_tokens, 1, tokens, NULL, pairs + 2 * num_tokens, cache->tables + past};
	TRY(llama_forward_pass(model, stream, &batch, cache, NULL, logits_out, num_tokens - rows, 0.0f));
	cache->length = past + num_tokens;
	return DATAFLOW_OK;
}
