#include <math.h>

#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype attention_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_attention_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("attention", "dtype", dtype, attention_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {dtype,
				     dtype,
				     dtype,
				     DATAFLOW_INT32,
				     dtype,
				     DATAFLOW_FP32,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_FP32_SCALAR,
				     DATAFLOW_BOOL_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "attention", 13, dtypes);
}

Dataflow_Status dataflow_attention_kv_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("attention_kv", "dtype", dtype, attention_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {dtype,
				     dtype,
				     dtype,
				     DATAFLOW_INT32,
				     DATAFLOW_INT32,
				     dtype,
				     DATAFLOW_FP32,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_FP32_SCALAR,
				     DATAFLOW_BOOL_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "attention_kv", 15, dtypes);
}

Dataflow_Status dataflow_attention_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("attention_bwd", "dtype", dtype, attention_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {dtype,
				     dtype,
				     dtype,
				     dtype,
				     DATAFLOW_FP32,
				     DATAFLOW_FP32,
				     DATAFLOW_INT32,
				     dtype,
				     dtype,
				     dtype,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_FP32_SCALAR,
				     DATAFLOW_BOOL_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "attention_bwd", 17, dtypes);
}

Dataflow_Status dataflow_attention_bwd_delta_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("attention_bwd_delta", "dtype", dtype, attention_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {dtype, dtype, DATAFLOW_FP32, DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "attention_bwd_delta", 6, dtypes);
}

/* Sizes shared by forward and backward; fills the element counts of Q (and O, dO, dQ),
 * K (and V, dK, dV) and LSE (and D). */
static Dataflow_Status check_shapes(const char *op, int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
				    int64_t num_kv_heads, int64_t head_dim, float scale, int64_t *q_numel,
				    int64_t *kv_numel, int64_t *lse_numel)
{
	int64_t rows;
	Dataflow_Status st = ops_check_positive(op, "total_tokens", total_tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "num_seqs", num_seqs);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "num_q_heads", num_q_heads);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "num_kv_heads", num_kv_heads);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "head_dim", head_dim);
	if (st != DATAFLOW_OK)
		return st;
	if (head_dim > DATAFLOW_ATTENTION_MAX_HEAD_DIM)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: head_dim must be <= %d, got %lld", op,
					  DATAFLOW_ATTENTION_MAX_HEAD_DIM, (long long)head_dim);
	if (num_q_heads % num_kv_heads != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: num_q_heads (%lld) must be a multiple of num_kv_heads (%lld)", op,
					  (long long)num_q_heads, (long long)num_kv_heads);
	if (!isfinite(scale))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: scale must be finite, got %g", op,
					  (double)scale);
	if (num_seqs >= INT32_MAX || total_tokens > INT32_MAX)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: total_tokens (%lld) and num_seqs (%lld) must fit int32 cu_seqlens", op,
					  (long long)total_tokens, (long long)num_seqs);
	st = ops_mul_numel(op, "total_tokens*num_q_heads", total_tokens, num_q_heads, lse_numel);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "total_tokens*num_q_heads*head_dim", *lse_numel, head_dim, q_numel);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "total_tokens*num_kv_heads", total_tokens, num_kv_heads, &rows);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "total_tokens*num_kv_heads*head_dim", rows, head_dim, kv_numel);
	return st;
}

Dataflow_Status dataflow_submit_attention(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					  const void *q, const void *k, const void *v, const void *cu_seqlens,
					  void *out, void *lse, int64_t total_tokens, int64_t num_seqs,
					  int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, float scale,
					  int causal)
{
	const char *op = "attention";
	Op_Skeleton skeleton;
	int64_t qn, kvn, ln;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_attention_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = check_shapes(op, total_tokens, num_seqs, num_q_heads, num_kv_heads, head_dim, scale, &qn, &kvn, &ln);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "q", q, dtype, qn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "k", k, dtype, kvn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "v", v, dtype, kvn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "cu_seqlens", cu_seqlens, DATAFLOW_INT32, num_seqs + 1);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "out", out, dtype, qn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "lse", lse, DATAFLOW_FP32, ln);
	if (st != DATAFLOW_OK)
		return st;
	int c = causal != 0;
	void *args[] = {&q,	       &k,	 &v,	       &cu_seqlens,   &out,	&lse, &total_tokens,
			&num_seqs, &num_q_heads, &num_kv_heads, &head_dim, &scale, &c};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_attention_kv(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					     const void *q, const void *k, const void *v, const void *cu_seqlens_q,
					     const void *cu_seqlens_k, void *out, void *lse, int64_t total_q,
					     int64_t total_k, int64_t num_seqs, int64_t num_q_heads, int64_t num_kv_heads,
					     int64_t head_dim, float scale, int causal)
{
	const char *op = "attention_kv";
	Op_Skeleton skeleton;
	int64_t qn, kvn, ln, unused_q, unused_l;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_attention_kv_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = check_shapes(op, total_q, num_seqs, num_q_heads, num_kv_heads, head_dim, scale, &qn, &kvn, &ln);
	if (st == DATAFLOW_OK) /* the key side: K, V numel for total_k tokens */
		st = check_shapes(op, total_k, num_seqs, num_q_heads, num_kv_heads, head_dim, scale, &unused_q, &kvn,
				  &unused_l);
	const char *names[] = {"q", "out", "k", "v"};
	const void *ptrs[] = {q, out, k, v};
	for (int i = 0; i < 4 && st == DATAFLOW_OK; i++)
		st = ops_check_tensor(handle, op, names[i], ptrs[i], dtype, i < 2 ? qn : kvn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "cu_seqlens_q", cu_seqlens_q, DATAFLOW_INT32, num_seqs + 1);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "cu_seqlens_k", cu_seqlens_k, DATAFLOW_INT32, num_seqs + 1);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "lse", lse, DATAFLOW_FP32, ln);
	if (st != DATAFLOW_OK)
		return st;
	int c = causal != 0;
	void *args[] = {&q,	    &k,		  &v,		 &cu_seqlens_q, &cu_seqlens_k,
			&out,	    &lse,	  &total_q,	 &total_k,	&num_seqs,
			&num_q_heads, &num_kv_heads, &head_dim, &scale,	&c};
	return ops_submit(handle, stream_id, &skeleton, args);
}

int64_t dataflow_attention_bwd_workspace_bytes(int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					       int64_t num_kv_heads, int64_t head_dim)
{
	int64_t qn, kvn, ln;
	if (check_shapes("attention_bwd_workspace_bytes", total_tokens, num_seqs, num_q_heads, num_kv_heads, head_dim,
			 1.0f, &qn, &kvn, &ln) != DATAFLOW_OK)
		return -1;
	return ln * (int64_t)sizeof(float); /* D = rowsum(dO * O), [num_q_heads][total_tokens] */
}

Dataflow_Status dataflow_submit_attention_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      const void *dout, const void *q, const void *k, const void *v,
					      const void *out, const void *lse, const void *cu_seqlens, void *dq,
					      void *dk, void *dv, void *workspace, int64_t workspace_bytes,
					      int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					      int64_t num_kv_heads, int64_t head_dim, float scale, int causal)
{
	const char *op = "attention_bwd";
	Op_Skeleton skeleton, delta_skeleton;
	int64_t qn, kvn, ln;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_attention_bwd_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = dataflow_attention_bwd_delta_skeleton(&delta_skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = check_shapes(op, total_tokens, num_seqs, num_q_heads, num_kv_heads, head_dim, scale, &qn, &kvn, &ln);
	if (st == DATAFLOW_OK && workspace_bytes < ln * (int64_t)sizeof(float))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"%s: workspace_bytes must be >= %lld (dataflow_attention_bwd_workspace_bytes), got %lld",
					op, (long long)(ln * (int64_t)sizeof(float)), (long long)workspace_bytes);
	const char *names[] = {"dout", "q", "out", "dq", "k", "v", "dk", "dv"};
	const void *ptrs[] = {dout, q, out, dq, k, v, dk, dv};
	for (int i = 0; i < 8 && st == DATAFLOW_OK; i++)
		st = ops_check_tensor(handle, op, names[i], ptrs[i], dtype, i < 4 ? qn : kvn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "lse", lse, DATAFLOW_FP32, ln);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "cu_seqlens", cu_seqlens, DATAFLOW_INT32, num_seqs + 1);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "workspace", workspace, DATAFLOW_FP32, ln);
	if (st != DATAFLOW_OK)
		return st;
	void *delta_args[] = {&dout, &out, &workspace, &total_tokens, &num_q_heads, &head_dim};
	st = ops_submit(handle, stream_id, &delta_skeleton, delta_args);
	if (st != DATAFLOW_OK)
		return st;
	int c = causal != 0;
	void *args[] = {&dout,	       &q,	 &k,	       &v,	      &lse,	     &workspace,
			&cu_seqlens,   &dq,	 &dk,	       &dv,	      &total_tokens, &num_seqs,
			&num_q_heads, &num_kv_heads, &head_dim, &scale, &c};
	return ops_submit(handle, stream_id, &skeleton, args);
}
