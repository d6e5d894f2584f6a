/* attention_bwd: D = rowsum(dout * out), then the gradients (ops.h). */
#include "op_catalogue_internal.h"
#include "dataflow/op_args.h"

int64_t dataflow_attention_bwd_workspace_bytes(int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					       int64_t num_kv_heads, int64_t head_dim)
{
	int64_t bytes; /* D: fp32 [num_q_heads][total_tokens] */
	if (total_tokens <= 0 || num_seqs <= 0 || num_q_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 ||
	    __builtin_mul_overflow(total_tokens, num_q_heads, &bytes) ||
	    __builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes))
		return -1;
	return bytes;
}

/* Checks the workspace (it holds D) and fills attention_bwd_delta's arguments (d_args point
 * into d). */
static Dataflow_Status delta_args(const char *op, const void *dout, const void *out, void *workspace,
				  int64_t workspace_bytes, int64_t total_q, int64_t num_seqs, int64_t num_q_heads,
				  int64_t num_kv_heads, int64_t head_dim, Dataflow_Attention_Bwd_Delta_Args *d,
				  void **d_args)
{
	int64_t need = dataflow_attention_bwd_workspace_bytes(total_q, num_seqs, num_q_heads, num_kv_heads, head_dim);
	if (need >= 0 && workspace_bytes < need) /* invalid sizes are the ops' signatures to name */
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: workspace_bytes must be >= %lld (dataflow_attention_bwd_workspace_bytes), got %lld",
					  op, (long long)need, (long long)workspace_bytes);
	*d = (Dataflow_Attention_Bwd_Delta_Args){.dout = dout,
						 .out = out,
						 .D = workspace,
						 .total_tokens = total_q,
						 .num_q_heads = num_q_heads,
						 .head_dim = head_dim};
	dataflow_attention_bwd_delta_arg_pointers(d, d_args);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_submit_attention_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      const void *dout, const void *q, const void *k, const void *v,
					      const void *out, const void *lse, const void *cu_seqlens, void *dq,
					      void *dk, void *dv, void *workspace, int64_t workspace_bytes,
					      int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					      int64_t num_kv_heads, int64_t head_dim, float scale, int causal,
					      int64_t window)
{
	Dataflow_Attention_Bwd_Delta_Args d;
	void *d_args[DATAFLOW_MAX_OP_ARGS], *g_args[DATAFLOW_MAX_OP_ARGS];
	Dataflow_Status st = delta_args("attention_bwd", dout, out, workspace, workspace_bytes, total_tokens,
					num_seqs, num_q_heads, num_kv_heads, head_dim, &d, d_args);
	if (st != DATAFLOW_OK)
		return st;
	Dataflow_Attention_Bwd_Args g = {.dout = dout, .q = q, .k = k, .v = v, .out = out, .lse = lse, .D = workspace,
					 .cu_seqlens = cu_seqlens, .dq = dq, .dk = dk, .dv = dv,
					 .total_tokens = total_tokens, .num_seqs = num_seqs, .num_q_heads = num_q_heads,
					 .num_kv_heads = num_kv_heads, .head_dim = head_dim, .scale = scale,
					 .causal = causal != 0, .window = window};
	dataflow_attention_bwd_arg_pointers(&g, g_args);
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_ATTENTION_BWD_DELTA, &dtype, d_args,
				    DATAFLOW_OP_ATTENTION_BWD, &dtype, g_args);
}

Dataflow_Status dataflow_submit_attention_kv_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
						 const void *dout, const void *q, const void *k, const void *v,
						 const void *out, const void *lse, const void *cu_seqlens_q,
						 const void *cu_seqlens_k, void *dq, float *dk, float *dv, void *workspace,
						 int64_t workspace_bytes, int64_t total_q, int64_t total_k, int64_t num_seqs,
						 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, float scale,
						 int causal, int64_t window)
{
	Dataflow_Attention_Bwd_Delta_Args d;
	void *d_args[DATAFLOW_MAX_OP_ARGS], *g_args[DATAFLOW_MAX_OP_ARGS];
	Dataflow_Status st = delta_args("attention_kv_bwd", dout, out, workspace, workspace_bytes, total_q, num_seqs,
					num_q_heads, num_kv_heads, head_dim, &d, d_args);
	if (st != DATAFLOW_OK)
		return st;
	Dataflow_Attention_Kv_Bwd_Args g = {.dout = dout, .q = q, .k = k, .v = v, .out = out, .lse = lse,
					    .D = workspace, .cu_seqlens_q = cu_seqlens_q, .cu_seqlens_k = cu_seqlens_k,
					    .dq = dq, .dk = dk, .dv = dv, .total_q = total_q, .total_k = total_k,
					    .num_seqs = num_seqs, .num_q_heads = num_q_heads,
					    .num_kv_heads = num_kv_heads, .head_dim = head_dim, .scale = scale,
					    .causal = causal != 0, .window = window};
	dataflow_attention_kv_bwd_arg_pointers(&g, g_args);
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_ATTENTION_BWD_DELTA, &dtype, d_args,
				    DATAFLOW_OP_ATTENTION_KV_BWD, &dtype, g_args);
}
