/* rms_norm_bwd_w: per-block partial sums, then their reduction (ops.h). */
#include "op_catalogue_internal.h"
#include "dataflow/op_args.h"

int64_t dataflow_rms_norm_bwd_w_workspace_bytes(int64_t rows, int64_t hidden)
{
	const int64_t b = DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
	int64_t bytes;
	if (rows <= 0 || hidden <= 0 || __builtin_mul_overflow(rows / b + (rows % b != 0), hidden, &bytes) ||
	    __builtin_mul_overflow(bytes, (int64_t)sizeof(float), &bytes))
		return 0;
	return bytes;
}

Dataflow_Status dataflow_submit_rms_norm_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       DataflowDatatype dw_dtype, int64_t rows, int64_t hidden, const void *dy,
					       const void *x, const void *rstd, void *workspace, void *dw)
{
	Dataflow_Rms_Norm_Bwd_W_Partials_Args p = {
		.rows = rows, .hidden = hidden, .dy = dy, .x = x, .rstd = rstd, .workspace = workspace};
	Dataflow_Rms_Norm_Bwd_W_Reduce_Args r = {.rows = rows, .hidden = hidden, .workspace = workspace, .dw = dw};
	void *p_args[DATAFLOW_MAX_OP_ARGS], *r_args[DATAFLOW_MAX_OP_ARGS];
	dataflow_rms_norm_bwd_w_partials_arg_pointers(&p, p_args);
	dataflow_rms_norm_bwd_w_reduce_arg_pointers(&r, r_args);
	if (dw_dtype != dtype && dw_dtype != DATAFLOW_FP32) { /* the reduce allows more; the composite does not */
		const char *want = dataflow_datatype_name(dtype), *got = dataflow_datatype_name(dw_dtype);
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rms_norm_bwd_w: dw dtype must be one of {%s, fp32}, got %s (%d)",
					  want ? want : "dy's", got ? got : "invalid", (int)dw_dtype);
	}
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_RMS_NORM_BWD_W_PARTIALS, &dtype,
				    p_args, DATAFLOW_OP_RMS_NORM_BWD_W_REDUCE, &dw_dtype, r_args);
}
