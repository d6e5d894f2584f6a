#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype ce_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_cross_entropy_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("cross_entropy", "logits", dtype, ce_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT32_SCALAR,
				     DATAFLOW_FP32_SCALAR,  dtype,		    DATAFLOW_INT32,
				     DATAFLOW_FP32,	    dtype};
	return dataflow_op_skeleton_init(skeleton, "cross_entropy", 8, dtypes);
}

Dataflow_Status dataflow_submit_cross_entropy(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      int64_t tokens, int64_t vocab, int32_t ignore_index, float scale,
					      const void *logits, const int32_t *labels, float *loss, void *dlogits)
{
	const char *op = "cross_entropy";
	Op_Skeleton skeleton;
	int64_t numel = 0;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_cross_entropy_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "tokens", tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "vocab", vocab);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "logits elements (tokens x vocab)", tokens, vocab, &numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "logits", logits, dtype, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "labels", labels, DATAFLOW_INT32, tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "loss", loss, DATAFLOW_FP32, tokens);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "dlogits", dlogits, dtype, numel);
	if (st != DATAFLOW_OK)
		return st;
	/* dlogits may be logits itself, but no other overlap: rows are rewritten as they are read */
	uintptr_t x = (uintptr_t)logits, g = (uintptr_t)dlogits;
	uintptr_t bytes = (uintptr_t)numel * dataflow_datatype_size(dtype);
	if (g != x && g < x + bytes && x < g + bytes)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: dlogits must be logits itself or not overlap it, got dlogits %p partly "
					  "overlapping logits %p (%llu bytes)",
					  op, dlogits, logits, (unsigned long long)bytes);
	void *args[] = {&tokens, &vocab, &ignore_index, &scale, &logits, &labels, &loss, &dlogits};
	return ops_submit(handle, stream_id, &skeleton, args);
}
