#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype set_mem_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_set_mem_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("set_mem", "dtype", dtype, set_mem_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, dtype};
	return dataflow_op_skeleton_init(skeleton, "set_mem", 3, dtypes);
}

Dataflow_Status dataflow_submit_set_mem(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t n,
					float value, void *x)
{
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle("set_mem", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_set_mem_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("set_mem", "n", n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "set_mem", "x", x, dtype, n);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&n, &value, &x};
	return ops_submit(handle, stream_id, &skeleton, args);
}
