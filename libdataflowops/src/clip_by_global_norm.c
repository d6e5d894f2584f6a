#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype sumsq_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP64};

Dataflow_Status dataflow_clip_by_global_norm_skeleton(Op_Skeleton *skeleton, DataflowDatatype sumsq_dtype)
{
	Dataflow_Status st = ops_check_dtype("clip_by_global_norm", "sumsq", sumsq_dtype, sumsq_dtypes, 2);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {sumsq_dtype, DATAFLOW_FP64_SCALAR, DATAFLOW_FP32, DATAFLOW_FP32};
	return dataflow_op_skeleton_init(skeleton, "clip_by_global_norm", 4, dtypes);
}

Dataflow_Status dataflow_submit_clip_by_global_norm(Dataflow_Handle *handle, int stream_id,
						    DataflowDatatype sumsq_dtype, const void *sumsq, double max_norm,
						    void *scale, void *norm)
{
	const char *op = "clip_by_global_norm";
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_clip_by_global_norm_skeleton(&skeleton, sumsq_dtype);
	if (st == DATAFLOW_OK && !(max_norm > 0 && max_norm - max_norm == 0))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"%s: max_norm must be a finite number > 0, got %g", op, max_norm);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "sumsq", sumsq, sumsq_dtype, 1);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "scale", scale, DATAFLOW_FP32, 1);
	if (st == DATAFLOW_OK && norm)
		st = ops_check_tensor(handle, op, "norm", norm, DATAFLOW_FP32, 1);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&sumsq, &max_norm, &scale, &norm};
	return ops_submit(handle, stream_id, &skeleton, args);
}
