#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype add_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_add_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("add", "dtype", dtype, add_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, dtype, DATAFLOW_FP32_SCALAR, dtype, dtype};
	return dataflow_op_skeleton_init(skeleton, "add", 6, dtypes);
}

Dataflow_Status dataflow_submit_add(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t n,
				    float alpha, const void *a, float beta, const void *b, void *out)
{
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle("add", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_add_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("add", "n", n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "add", "a", a, dtype, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "add", "b", b, dtype, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "add", "out", out, dtype, n);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&n, &alpha, &a, &beta, &b, &out};
	return ops_submit(handle, stream_id, &skeleton, args);
}
