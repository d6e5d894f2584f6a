#include <float.h>

#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype norm_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_rms_norm_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("rms_norm", "x/w/y", dtype, norm_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_FP32_SCALAR, dtype, dtype,
				     dtype, DATAFLOW_FP32};
	return dataflow_op_skeleton_init(skeleton, "rms_norm", 7, dtypes);
}

Dataflow_Status dataflow_rms_norm_bwd_x_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("rms_norm_bwd_x", "dy/x/w/dx", dtype, norm_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, dtype, dtype, dtype, DATAFLOW_FP32,
				     dtype};
	return dataflow_op_skeleton_init(skeleton, "rms_norm_bwd_x", 7, dtypes);
}

Dataflow_Status dataflow_rms_norm_bwd_w_partials_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype)
{
	Dataflow_Status st = ops_check_dtype("rms_norm_bwd_w", "dy/x", dtype, norm_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, dtype, dtype, DATAFLOW_FP32,
				     DATAFLOW_FP32};
	return dataflow_op_skeleton_init(skeleton, "rms_norm_bwd_w_partials", 6, dtypes);
}

Dataflow_Status dataflow_rms_norm_bwd_w_reduce_skeleton(Op_Skeleton *skeleton, DataflowDatatype dw_dtype)
{
	Dataflow_Status st = ops_check_dtype("rms_norm_bwd_w_reduce", "dw", dw_dtype, norm_dtypes, 3);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_FP32, dw_dtype};
	return dataflow_op_skeleton_init(skeleton, "rms_norm_bwd_w_reduce", 4, dtypes);
}

int64_t dataflow_rms_norm_bwd_w_workspace_bytes(int64_t rows, int64_t hidden)
{
	int64_t blocks = (rows + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS - 1) / DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
	if (rows <= 0 || hidden <= 0 || blocks > INT64_MAX / 16 / hidden)
		return 0;
	return blocks * hidden * (int64_t)sizeof(float);
}

/* The checks every rms_norm op shares: rows, hidden > 0, rows * hidden in range, x and w. */
static Dataflow_Status check_rows(Dataflow_Handle *handle, const char *op, DataflowDatatype dtype, int64_t rows,
				  int64_t hidden, const void *x, const void *w, int64_t *numel)
{
	Dataflow_Status st = ops_check_positive(op, "rows", rows);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "hidden", hidden);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel(op, "rows*hidden", rows, hidden, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "x", x, dtype, *numel);
	if (st == DATAFLOW_OK && w)
		st = ops_check_tensor(handle, op, "w", w, dtype, hidden);
	return st;
}

Dataflow_Status dataflow_submit_rms_norm(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					 int64_t rows, int64_t hidden, float eps, const void *x, const void *w,
					 void *y, void *rstd)
{
	Op_Skeleton skeleton;
	int64_t numel = 0;
	Dataflow_Status st = ops_check_handle("rms_norm", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_rms_norm_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_range("rms_norm", "eps", eps, 0.0, FLT_MAX, 0);
	if (st == DATAFLOW_OK && !w)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rms_norm: w is NULL");
	if (st == DATAFLOW_OK)
		st = check_rows(handle, "rms_norm", dtype, rows, hidden, x, w, &numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm", "y", y, dtype, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm", "rstd", rstd, DATAFLOW_FP32, rows);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&rows, &hidden, &eps, &x, &w, &y, &rstd};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_rms_norm_bwd_x(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       int64_t rows, int64_t hidden, const void *dy, const void *x,
					       const void *w, const void *rstd, void *dx)
{
	Op_Skeleton skeleton;
	int64_t numel = 0;
	Dataflow_Status st = ops_check_handle("rms_norm_bwd_x", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_rms_norm_bwd_x_skeleton(&skeleton, dtype);
	if (st == DATAFLOW_OK && !w)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "rms_norm_bwd_x: w is NULL");
	if (st == DATAFLOW_OK)
		st = check_rows(handle, "rms_norm_bwd_x", dtype, rows, hidden, x, w, &numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_x", "dy", dy, dtype, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_x", "rstd", rstd, DATAFLOW_FP32, rows);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_x", "dx", dx, dtype, numel);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&rows, &hidden, &dy, &x, &w, &rstd, &dx};
	return ops_submit(handle, stream_id, &skeleton, args);
}

Dataflow_Status dataflow_submit_rms_norm_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       DataflowDatatype dw_dtype, int64_t rows, int64_t hidden, const void *dy,
					       const void *x, const void *rstd, void *workspace, void *dw)
{
	Op_Skeleton partial, reduce;
	int64_t numel = 0;
	DataflowDatatype dw_allowed[] = {dtype, DATAFLOW_FP32};
	Dataflow_Status st = ops_check_handle("rms_norm_bwd_w", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_rms_norm_bwd_w_partials_skeleton(&partial, dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("rms_norm_bwd_w", "dw", dw_dtype, dw_allowed, 2);
	if (st == DATAFLOW_OK)
		st = dataflow_rms_norm_bwd_w_reduce_skeleton(&reduce, dw_dtype);
	if (st == DATAFLOW_OK)
		st = check_rows(handle, "rms_norm_bwd_w", dtype, rows, hidden, x, NULL, &numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_w", "dy", dy, dtype, numel);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_w", "rstd", rstd, DATAFLOW_FP32, rows);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_w", "workspace", workspace, DATAFLOW_FP32,
				      dataflow_rms_norm_bwd_w_workspace_bytes(rows, hidden) / (int64_t)sizeof(float));
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "rms_norm_bwd_w", "dw", dw, dw_dtype, hidden);
	/* both halves or neither: the reduce must be known before the partial sums are queued */
	if (st == DATAFLOW_OK && !dataflow_op_is_registered(handle, &reduce))
		st = dataflow_set_error(DATAFLOW_ERR_UNKNOWN_OP, "rms_norm_bwd_w: its reduce op (rms_norm_bwd_w_reduce, dw %s) is not registered on this handle",
					dataflow_datatype_name(dw_dtype));
	if (st != DATAFLOW_OK)
		return st;
	void *partial_args[] = {&rows, &hidden, &dy, &x, &rstd, &workspace};
	st = ops_submit(handle, stream_id, &partial, partial_args);
	if (st != DATAFLOW_OK)
		return st;
	void *reduce_args[] = {&rows, &hidden, &workspace, &dw};
	return ops_submit(handle, stream_id, &reduce, reduce_args);
}
