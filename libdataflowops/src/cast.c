#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype cast_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16, DATAFLOW_FP8E4M3,
					       DATAFLOW_FP8E5M2};

Dataflow_Status dataflow_cast_skeleton(Op_Skeleton *skeleton, DataflowDatatype src_dtype, DataflowDatatype dst_dtype)
{
	Dataflow_Status st = ops_check_dtype("cast", "src", src_dtype, cast_dtypes, 5);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("cast", "dst", dst_dtype, cast_dtypes, 5);
	if (st == DATAFLOW_OK && src_dtype == dst_dtype)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"cast: src and dst dtypes must differ (both %s); copy with a peer transfer",
					dataflow_datatype_name(src_dtype));
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, src_dtype, dst_dtype};
	return dataflow_op_skeleton_init(skeleton, "cast", 3, dtypes);
}

Dataflow_Status dataflow_submit_cast(Dataflow_Handle *handle, int stream_id, DataflowDatatype src_dtype,
				     DataflowDatatype dst_dtype, int64_t n, const void *src, void *dst)
{
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle("cast", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_cast_skeleton(&skeleton, src_dtype, dst_dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("cast", "n", n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "cast", "src", src, src_dtype, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "cast", "dst", dst, dst_dtype, n);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&n, &src, &dst};
	return ops_submit(handle, stream_id, &skeleton, args);
}
