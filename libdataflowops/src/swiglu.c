#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype swiglu_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_swiglu_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("swiglu", "dtype", dtype, swiglu_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, dtype, dtype, dtype};
	return dataflow_op_skeleton_init(skeleton, "swiglu", 5, dtypes);
}

Dataflow_Status dataflow_swiglu_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("swiglu_bwd", "dtype", dtype, swiglu_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, dtype, dtype, dtype, dtype, dtype};
	return dataflow_op_skeleton_init(skeleton, "swiglu_bwd", 7, dtypes);
}

/* rows, ffn > 0 and every [rows, ffn] tensor in range; names and pointers come in pairs */
static Dataflow_Status check_tensors(Dataflow_Handle *handle, const char *op, DataflowDatatype dtype, int64_t rows,
				     int64_t ffn, int count, const char *const *names, const void *const *ptrs)
{
	int64_t numel = 0;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "rows", rows);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "ffn", ffn);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "rows*ffn", rows, ffn, &numel);
	for (int i = 0; i < count && st == DATAFLOW_OK; i++)
		st = ops_check_tensor(handle, op, names[i], ptrs[i], dtype, numel);
	return st;
}

Dataflow_Status dataflow_submit_swiglu(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t rows,
				       int64_t ffn, const void *gate, const void *up, void *out)
{
	Op_Skeleton skeleton;
	const char *names[] = {"gate", "up", "out"};
	const void *ptrs[] = {gate, up, out};
	Dataflow_Status st = dataflow_swiglu_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = check_tensors(handle, "swiglu", dtype, rows, ffn, 3, names, ptrs);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&rows, &ffn, &gate, &up, &out};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_swiglu_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					   int64_t rows, int64_t ffn, const void *d_out, const void *gate,
					   const void *up, void *d_gate, void *d_up)
{
	Op_Skeleton skeleton;
	const char *names[] = {"d_out", "gate", "up", "d_gate", "d_up"};
	const void *ptrs[] = {d_out, gate, up, d_gate, d_up};
	Dataflow_Status st = dataflow_swiglu_bwd_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = check_tensors(handle, "swiglu_bwd", dtype, rows, ffn, 5, names, ptrs);
	if (st == DATAFLOW_OK && d_gate == d_up)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "swiglu_bwd: d_gate and d_up are the same buffer");
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&rows, &ffn, &d_out, &gate, &up, &d_gate, &d_up};
	return ops_submit(handle, stream_id, &skeleton, args);
}
