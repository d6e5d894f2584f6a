/* grad_norm_sq: the partial sums per block, then their reduction (ops.h). */
#include "op_catalogue_internal.h"
#include "dataflow/op_args.h"

int64_t dataflow_grad_norm_sq_workspace_bytes(int64_t n)
{
	if (n <= 0)
		return 0;
	return (n / DATAFLOW_GRAD_NORM_BLOCK + (n % DATAFLOW_GRAD_NORM_BLOCK != 0)) * (int64_t)sizeof(double);
}

Dataflow_Status dataflow_submit_grad_norm_sq(Dataflow_Handle *handle, int stream_id, DataflowDatatype x_dtype,
					     DataflowDatatype out_dtype, int64_t n, const void *x, void *workspace,
					     void *out, int accumulate)
{
	Dataflow_Grad_Norm_Sq_Partials_Args p = {.n = n, .x = x, .workspace = workspace};
	Dataflow_Grad_Norm_Sq_Reduce_Args r = {
		.num_blocks = dataflow_grad_norm_sq_workspace_bytes(n) / (int64_t)sizeof(double),
		.workspace = workspace,
		.out = out,
		.accumulate = accumulate != 0,
	};
	void *p_args[DATAFLOW_MAX_OP_ARGS], *r_args[DATAFLOW_MAX_OP_ARGS];
	dataflow_grad_norm_sq_partials_arg_pointers(&p, p_args);
	dataflow_grad_norm_sq_reduce_arg_pointers(&r, r_args);
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_GRAD_NORM_SQ_PARTIALS, &x_dtype, p_args,
				    DATAFLOW_OP_GRAD_NORM_SQ_REDUCE, &out_dtype, r_args);
}
