#include <math.h>

#include "check.h"
#include "dataflow/ops.h"

static const DataflowDatatype adamw_dtypes[] = {DATAFLOW_FP32, DATAFLOW_BF16};

Dataflow_Status dataflow_adamw_step_skeleton(Op_Skeleton *skeleton, DataflowDatatype param_dtype,
					     DataflowDatatype grad_dtype)
{
	Dataflow_Status st = ops_check_dtype("adamw_step", "param", param_dtype, adamw_dtypes, 2);
	if (st == DATAFLOW_OK)
		st = ops_check_dtype("adamw_step", "grad", grad_dtype, adamw_dtypes, 2);
	if (st != DATAFLOW_OK)
		return st;
	DataflowDatatype f = DATAFLOW_FP32, d = DATAFLOW_FP64_SCALAR;
	DataflowDatatype dtypes[] = {DATAFLOW_INT64_SCALAR, param_dtype, grad_dtype, f, f, f, f, d, d, d, d, d,
				     DATAFLOW_INT64_SCALAR};
	return dataflow_op_skeleton_init(skeleton, "adamw_step", 13, dtypes);
}

Dataflow_Status dataflow_submit_adamw_step(Dataflow_Handle *handle, int stream_id, DataflowDatatype param_dtype,
					   DataflowDatatype grad_dtype, int64_t n, void *param, const void *grad, void *m,
					   void *v, void *master, const void *scale, double lr, double beta1,
					   double beta2, double eps, double weight_decay, int64_t step)
{
	const char *op = "adamw_step";
	Op_Skeleton skeleton;
	Dataflow_Status st = ops_check_handle(op, handle);
	if (st == DATAFLOW_OK)
		st = dataflow_adamw_step_skeleton(&skeleton, param_dtype, grad_dtype);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "n", n);
	if (st == DATAFLOW_OK)
		st = ops_check_positive(op, "step", step);
	if (st == DATAFLOW_OK)
		st = ops_check_range(op, "lr", lr, 0.0, INFINITY, 0);
	if (st == DATAFLOW_OK)
		st = ops_check_range(op, "beta1", beta1, 0.0, 1.0, 1);
	if (st == DATAFLOW_OK)
		st = ops_check_range(op, "beta2", beta2, 0.0, 1.0, 1);
	if (st == DATAFLOW_OK)
		st = ops_check_range(op, "eps", eps, 0.0, INFINITY, 0);
	if (st == DATAFLOW_OK)
		st = ops_check_range(op, "weight_decay", weight_decay, 0.0, INFINITY, 0);
	if (st == DATAFLOW_OK && master && param_dtype != DATAFLOW_BF16)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"%s: master must be NULL unless param is bf16, got param dtype %s", op,
					dataflow_datatype_name(param_dtype));
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "param", param, param_dtype, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "grad", grad, grad_dtype, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "m", m, DATAFLOW_FP32, n);
	if (st == DATAFLOW_OK)
		st = ops_check_tensor(handle, op, "v", v, DATAFLOW_FP32, n);
	if (st == DATAFLOW_OK && master)
		st = ops_check_tensor(handle, op, "master", master, DATAFLOW_FP32, n);
	if (st == DATAFLOW_OK && scale)
		st = ops_check_tensor(handle, op, "scale", scale, DATAFLOW_FP32, 1);
	if (st != DATAFLOW_OK)
		return st;
	void *args[] = {&n, &param, &grad, &m, &v, &master, &scale, &lr, &beta1, &beta2, &eps, &weight_decay, &step};
	return ops_submit(handle, stream_id, &skeleton, args);
}
