#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype embedding_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};
static const DataflowDatatype embedding_id_dtypes[] = {DATAFLOW_INT32, DATAFLOW_INT64};
static const DataflowDatatype embedding_grad_dtypes[] = {DATAFLOW_FP32};

Dataflow_Status dataflow_embedding_skeleton(Op_Skeleton *skeleton, DataflowDatatype id_dtype, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("embedding", "ids", id_dtype, embedding_id_dtypes, 2);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("embedding", "table", dtype, embedding_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, id_dtype, dtype,
				     dtype};
	return dataflow_op_skeleton_init(skeleton, "embedding", 6, dtypes);
}

Dataflow_Status dataflow_embedding_bwd_w_skeleton(Op_Skeleton *skeleton, DataflowDatatype id_dtype,
						  DataflowDatatype dtype, DataflowDatatype grad_dtype)
{
	Dataflow_Status st = ops_check_dtype("embedding_bwd_w", "ids", id_dtype, embedding_id_dtypes, 2);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("embedding_bwd_w", "d_out", dtype, embedding_dtypes, 3);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("embedding_bwd_w", "d_table", grad_dtype, embedding_grad_dtypes, 1);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, id_dtype, dtype,
				     grad_dtype};
	return dataflow_op_skeleton_init(skeleton, "embedding_bwd_w", 6, dtypes);
}

/* The checks both directions share: sizes, and the extents of ids, the [tokens, hidden]
 * rows and the [vocab, hidden] table. */
static Dataflow_Status embedding_check(Dataflow_Handle *handle, const char *op, int64_t num_tokens, int64_t hidden,
				       int64_t vocab, DataflowDatatype id_dtype, const void *ids, const char *rows_name,
				       DataflowDatatype rows_dtype, const void *rows, const char *table_name,
				       DataflowDatatype table_dtype, const void *table)
{
	int64_t rows_numel, table_numel;
	Dataflow_Status st = ops_check_positive(op, "num_tokens", num_tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "hidden", hidden);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "vocab", vocab);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "num_tokens x hidden", num_tokens, hidden, &rows_numel);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "vocab x hidden", vocab, hidden, &table_numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "ids", ids, id_dtype, num_tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, rows_name, rows, rows_dtype, rows_numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, table_name, table, table_dtype, table_numel);
	return st;
}

Dataflow_Status dataflow_submit_embedding(Dataflow_Handle *handle, int stream_id, DataflowDatatype id_dtype,
					  DataflowDatatype dtype, int64_t num_tokens, int64_t hidden, int64_t vocab,
					  const void *ids, const void *table, void *out)
{
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle("embedding", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_embedding_skeleton(&skeleton, id_dtype, dtype);
	if (st == DATAFLOW_OK)
		st = embedding_check(handle, "embedding", num_tokens, hidden, vocab, id_dtype, ids, "out", dtype, out,
				     "table", dtype, table);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&num_tokens, &hidden, &vocab, &ids, &table, &out};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_embedding_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype id_dtype,
						DataflowDatatype dtype, DataflowDatatype grad_dtype, int64_t num_tokens,
						int64_t hidden, int64_t vocab, const void *ids, const void *d_out,
						void *d_table)
{
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle("embedding_bwd_w", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_embedding_bwd_w_skeleton(&skeleton, id_dtype, dtype, grad_dtype);
	if (st == DATAFLOW_OK)
		st = embedding_check(handle, "embedding_bwd_w", num_tokens, hidden, vocab, id_dtype, ids, "d_out", dtype,
				     d_out, "d_table", grad_dtype, d_table);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&num_tokens, &hidden, &vocab, &ids, &d_out, &d_table};
	return ops_submit(handle, stream_id, &skeleton, args);
}
