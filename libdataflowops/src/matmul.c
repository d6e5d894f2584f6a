#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype matmul_in_dtypes[] = {DATAFLOW_FP32, DATAFLOW_FP16, DATAFLOW_BF16};

Dataflow_Status dataflow_matmul_skeleton(Op_Skeleton *skeleton, DataflowDatatype in_dtype, DataflowDatatype out_dtype)
{
	Dataflow_Status st = ops_check_dtype("matmul", "A/B", in_dtype, matmul_in_dtypes, 3);
	DataflowDatatype out_allowed[] = {DATAFLOW_FP32, in_dtype};
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("matmul", "C/D", out_dtype, out_allowed, 2);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype dtypes[] = {in_dtype,
				     in_dtype,
				     out_dtype,
				     out_dtype,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_INT64_SCALAR,
				     DATAFLOW_BOOL_SCALAR,
				     DATAFLOW_BOOL_SCALAR,
				     DATAFLOW_FP32_SCALAR,
				     DATAFLOW_FP32_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "matmul", 11, dtypes);
}

Dataflow_Status dataflow_submit_matmul(Dataflow_Handle *handle, int stream_id, DataflowDatatype in_dtype,
				       DataflowDatatype out_dtype, const void *A, const void *B, const void *C,
				       void *D, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
				       float alpha, float beta)
{
	Op_Skeleton skeleton;
	int64_t mk, kn, mn;
	Dataflow_Status st = ops_check_handle("matmul", handle);
	if (st == DATAFLOW_OK)
		st = dataflow_matmul_skeleton(&skeleton, in_dtype, out_dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("matmul", "M", M);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("matmul", "N", N);
	if (st == DATAFLOW_OK)
		st = ops_check_positive("matmul", "K", K);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel("matmul", "M*K", M, K, &mk);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel("matmul", "K*N", K, N, &kn);
	if (st == DATAFLOW_OK)
		st = ops_mul_numel("matmul", "M*N", M, N, &mn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "matmul", "A", A, in_dtype, mk);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "matmul", "B", B, in_dtype, kn);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, "matmul", "D", D, out_dtype, mn);
	if (st == DATAFLOW_OK && beta != 0.0f)
		st = ops_check_tensor(handle, "matmul", "C (beta != 0)", C, out_dtype, mn);
	if (st != DATAFLOW_OK)
		return st;
	if (beta == 0.0f)
		C = NULL; /* never read; D's contents are ignored too, so NaNs in either do not leak in */
	int ta = trans_a != 0, tb = trans_b != 0;
	void *args[] = {&A, &B, &C, &D, &M, &N, &K, &ta, &tb, &alpha, &beta};
	return ops_submit(handle, stream_id, &skeleton, args);
}
