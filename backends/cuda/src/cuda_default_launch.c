/* Launch functions of the CUDA backend's native default ops beyond the elementwise ones
 * (cuda_default_ops.c): the grid each kernel of backends/cuda/kernels expects, from the
 * shapes alone (cuda_launch_config.c). Arguments were checked by the op's signature before
 * the launch function runs. */
#include "cuda_backend.h"
#include "cuda_launch_config.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"

#define LAUNCH(OP)                                                                                  \
	Dataflow_Status dataflow_cuda_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state, \
						    Dataflow_Launch_Config *c)

static int elem_size(const Op *op, int arg)
{
	return (int)dataflow_datatype_size(op->skeleton.arg_dtypes[arg]);
}

/* One block per row: embedding (rows of the table), rms_norm, rms_norm_bwd_x, cross_entropy. */
LAUNCH(embedding)
{
	(void)handle, (void)op_state;
	Dataflow_Embedding_Args a = dataflow_embedding_args(op->op_args);
	cuda_rows_config(a.num_tokens, a.hidden, elem_size(op, DATAFLOW_EMBEDDING_ARG_OUT), c);
	return DATAFLOW_OK;
}

LAUNCH(rms_norm)
{
	(void)handle, (void)op_state;
	Dataflow_Rms_Norm_Args a = dataflow_rms_norm_args(op->op_args);
	cuda_rows_config(a.rows, a.hidden, elem_size(op, DATAFLOW_RMS_NORM_ARG_X), c);
	return DATAFLOW_OK;
}

LAUNCH(rms_norm_bwd_x)
{
	(void)handle, (void)op_state;
	Dataflow_Rms_Norm_Bwd_X_Args a = dataflow_rms_norm_bwd_x_args(op->op_args);
	cuda_rows_config(a.rows, a.hidden, elem_size(op, DATAFLOW_RMS_NORM_BWD_X_ARG_X), c);
	return DATAFLOW_OK;
}

LAUNCH(cross_entropy)
{
	(void)handle, (void)op_state;
	Dataflow_Cross_Entropy_Args a = dataflow_cross_entropy_args(op->op_args);
	cuda_rows_config(a.tokens, a.vocab, elem_size(op, DATAFLOW_CROSS_ENTROPY_ARG_LOGITS), c);
	return DATAFLOW_OK;
}

/* Elementwise (grid-stride): rope and rope_bwd over (token, pair), swiglu and swiglu_bwd,
 * adamw_step, rms_norm_bwd_w_reduce over columns. */
LAUNCH(rope)
{
	(void)handle, (void)op_state;
	Dataflow_Rope_Args a = dataflow_rope_args(op->op_args);
	cuda_elementwise_config(a.num_tokens * (a.head_dim / 2), c);
	return DATAFLOW_OK;
}

LAUNCH(rope_bwd)
{
	(void)handle, (void)op_state;
	Dataflow_Rope_Bwd_Args a = dataflow_rope_bwd_args(op->op_args);
	cuda_elementwise_config(a.num_tokens * (a.head_dim / 2), c);
	return DATAFLOW_OK;
}

LAUNCH(swiglu)
{
	(void)handle, (void)op_state;
	Dataflow_Swiglu_Args a = dataflow_swiglu_args(op->op_args);
	cuda_elementwise_config(a.rows * a.ffn, c);
	return DATAFLOW_OK;
}

LAUNCH(swiglu_bwd)
{
	(void)handle, (void)op_state;
	Dataflow_Swiglu_Bwd_Args a = dataflow_swiglu_bwd_args(op->op_args);
	cuda_elementwise_config(a.rows * a.ffn, c);
	return DATAFLOW_OK;
}

LAUNCH(adamw_step)
{
	(void)handle, (void)op_state;
	cuda_elementwise_config(dataflow_adamw_step_args(op->op_args).n, c);
	return DATAFLOW_OK;
}

/* partials: one thread per (row block, column), grid (column groups, row blocks) */
LAUNCH(rms_norm_bwd_w_partials)
{
	(void)handle, (void)op_state;
	Dataflow_Rms_Norm_Bwd_W_Partials_Args a = dataflow_rms_norm_bwd_w_partials_args(op->op_args);
	int64_t blocks = (a.rows + DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS - 1) / DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS;
	if (!cuda_columns_config(a.hidden, blocks, c))
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "rms_norm_bwd_w: rows: at most %d on cuda, got %lld",
					  65535 * DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS, (long long)a.rows);
	return DATAFLOW_OK;
}

LAUNCH(rms_norm_bwd_w_reduce)
{
	(void)handle, (void)op_state;
	cuda_elementwise_config(dataflow_rms_norm_bwd_w_reduce_args(op->op_args).hidden, c);
	return DATAFLOW_OK;
}

/* 16 threads per DATAFLOW_GRAD_NORM_BLOCK elements */
LAUNCH(grad_norm_sq_partials)
{
	(void)handle, (void)op_state;
	int64_t n = dataflow_grad_norm_sq_partials_args(op->op_args).n;
	cuda_elementwise_config((n + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK * 16, c);
	return DATAFLOW_OK;
}

/* one warp walks the partials in order */
LAUNCH(grad_norm_sq_reduce)
{
	(void)handle, (void)op_state, (void)op;
	*c = (Dataflow_Launch_Config){{1, 1, 1}, {32, 1, 1}, 0, 1};
	return DATAFLOW_OK;
}

/* one thread: the input is one number */
LAUNCH(clip_by_global_norm)
{
	(void)handle, (void)op_state, (void)op;
	*c = (Dataflow_Launch_Config){{1, 1, 1}, {1, 1, 1}, 0, 1};
	return DATAFLOW_OK;
}

/* one warp per (token, query head) */
LAUNCH(attention_bwd_delta)
{
	(void)handle, (void)op_state;
	Dataflow_Attention_Bwd_Delta_Args a = dataflow_attention_bwd_delta_args(op->op_args);
	cuda_warps_config(a.total_tokens * a.num_q_heads, c);
	return DATAFLOW_OK;
}
