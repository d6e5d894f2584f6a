/* paged_attention: partial outputs per split of keys, then their combination (ops.h). */
#include "op_catalogue_internal.h"
#include "dataflow/op_args.h"

/* Splits of the longest table's keys (the partials' leading dimension). */
static int64_t num_splits(int64_t max_pages, int64_t page_size, int64_t split_size)
{
	int64_t keys;
	if (__builtin_mul_overflow(max_pages, page_size, &keys))
		return -1;
	return (keys + split_size - 1) / split_size;
}

int64_t dataflow_paged_attention_workspace_bytes(int64_t total_q, int64_t num_q_heads, int64_t head_dim,
						 int64_t max_pages, int64_t page_size, int64_t split_size)
{
	if (total_q <= 0 || num_q_heads <= 0 || head_dim <= 0 || max_pages <= 0 || page_size <= 0 || split_size <= 0)
		return -1;
	int64_t splits = num_splits(max_pages, page_size, split_size), bytes;
	if (splits < 0 || __builtin_mul_overflow(splits, total_q, &bytes) ||
	    __builtin_mul_overflow(bytes, num_q_heads, &bytes) || __builtin_mul_overflow(bytes, head_dim + 2, &bytes) ||
	    __builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes))
		return -1;
	return bytes;
}

Dataflow_Status dataflow_submit_paged_attention(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
						const void *q, const void *k_pages, const void *v_pages,
						const void *page_table, const void *seq_lens, const void *cu_seqlens_q,
						void *out, float *lse, void *workspace, int64_t workspace_bytes,
						int64_t total_q, int64_t batch, int64_t num_pages, int64_t page_size,
						int64_t max_pages, int64_t num_q_heads, int64_t num_kv_heads,
						int64_t head_dim, int64_t split_size, float scale)
{
	int64_t need = dataflow_paged_attention_workspace_bytes(total_q, num_q_heads, head_dim, max_pages, page_size,
								split_size);
	if (need >= 0 && workspace_bytes < need) /* invalid sizes are the ops' signatures to name */
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "paged_attention: workspace_bytes must be >= %lld "
					  "(dataflow_paged_attention_workspace_bytes), got %lld",
					  (long long)need, (long long)workspace_bytes);
	int64_t splits = split_size > 0 ? num_splits(max_pages, page_size, split_size) : 0;
	/* partial_o [splits][total_q][num_q_heads][head_dim], then partial_ml [...][2] */
	float *partial_o = workspace;
	float *partial_ml = need >= 0 ? partial_o + splits * total_q * num_q_heads * head_dim : NULL;
	void *p_args[DATAFLOW_MAX_OP_ARGS], *c_args[DATAFLOW_MAX_OP_ARGS];
	Dataflow_Paged_Attention_Partial_Args p = {.q = q, .k_pages = k_pages, .v_pages = v_pages,
						   .page_table = page_table, .seq_lens = seq_lens,
						   .cu_seqlens_q = cu_seqlens_q, .partial_o = partial_o,
						   .partial_ml = partial_ml, .total_q = total_q, .batch = batch,
						   .num_pages = num_pages, .page_size = page_size,
						   .max_pages = max_pages, .num_q_heads = num_q_heads,
						   .num_kv_heads = num_kv_heads, .head_dim = head_dim,
						   .split_size = split_size, .scale = scale};
	Dataflow_Paged_Attention_Combine_Args c = {.partial_o = partial_o, .partial_ml = partial_ml,
						   .cu_seqlens_q = cu_seqlens_q, .out = out, .lse = lse,
						   .total_q = total_q, .batch = batch, .num_q_heads = num_q_heads,
						   .head_dim = head_dim, .num_splits = splits};
	dataflow_paged_attention_partial_arg_pointers(&p, p_args);
	dataflow_paged_attention_combine_arg_pointers(&c, c_args);
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_PAGED_ATTENTION_PARTIAL, &dtype, p_args,
				    DATAFLOW_OP_PAGED_ATTENTION_COMBINE, &dtype, c_args);
}
