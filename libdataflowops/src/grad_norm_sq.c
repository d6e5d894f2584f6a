#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype x_dtypes[] = {DATAFLOW_FP32, DATAFLOW_BF16};
static const DataflowDatatype out_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP64};

int64_t dataflow_grad_norm_sq_workspace_bytes(int64_t n)
{
	if (n <= 0)
		return 0;
	return (n + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK * (int64_t)sizeof(double);
}

Dataflow_Status dataflow_grad_norm_sq_partials_skeleton(Op_Skeleton *skeleton, DataflowDatatype x_dtype)
{
	Dataflow_Status st = ops_check_dtype("grad_norm_sq", "x", x_dtype, x_dtypes, 2);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, x_dtype, DATAFLOW_FP64};
	return dataflow_op_skeleton_init(skeleton, "grad_norm_sq_partials", 3, dtypes);
}

Dataflow_Status dataflow_grad_norm_sq_reduce_skeleton(Op_Skeleton *skeleton, DataflowDatatype out_dtype)
{
	Dataflow_Status st = ops_check_dtype("grad_norm_sq", "out", out_dtype, out_dtypes, 2);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_FP64, out_dtype, DATAFLOW_BOOL_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "grad_norm_sq_reduce", 4, dtypes);
}

Dataflow_Status dataflow_submit_grad_norm_sq(Dataflow_Handle *handle, int stream_id, DataflowDatatype x_dtype,
					     DataflowDatatype out_dtype, int64_t n, const void *x, void *workspace,
					     void *out, int accumulate)
{
	const char *op = "grad_norm_sq";
	Op_Skeleton partials, reduce;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_grad_norm_sq_partials_skeleton(&partials, x_dtype);
	if (st == DATAFLOW_OK)
		st = dataflow_grad_norm_sq_reduce_skeleton(&reduce, out_dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "n", n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "x", x, x_dtype, n);
	int64_t num_blocks = dataflow_grad_norm_sq_workspace_bytes(n) / (int64_t)sizeof(double);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "workspace", workspace, DATAFLOW_FP64, num_blocks);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "out", out, out_dtype, 1);
	if (st != DATAFLOW_OK)
		return st;
	int acc = accumulate != 0;
	void *partial_args[] = {&n, &x, &workspace};
	void *reduce_args[] = {&num_blocks, &workspace, &out, &acc};
	st = ops_submit(handle, stream_id, &partials, partial_args);
	if (st == DATAFLOW_OK)
		st = ops_submit(handle, stream_id, &reduce, reduce_args);
	return st;
}
