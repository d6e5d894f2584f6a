/* Launch functions of the CUDA backend's native default ops: the grid each kernel of
 * backends/cuda/kernels expects, from the shapes alone (cuda_launch_config.c). Arguments were
 * checked by the op's signature before the launch function runs (so n > 0, etc.). */
#include "cuda_backend.h"
#include "cuda_launch_config.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"

#define LAUNCH(OP)                                                                                  \
	Dataflow_Status dataflow_cuda_##OP##_launch(Dataflow_Handle *handle, const Op *op, void *op_state, \
						    Dataflow_Launch_Config *c)

/* A launch function whose configuration is one call CONFIG over a, the op's TYPE arguments. */
#define LAUNCH_WITH(OP, TYPE, CONFIG)                                                                   \
	LAUNCH(OP)                                                                                          \
	{                                                                                                   \
		(void)handle, (void)op_state;                                                               \
		TYPE a = dataflow_##OP##_args(op->op_args);                                                  \
		CONFIG;                                                                                     \
		return DATAFLOW_OK;                                                                         \
	}

static int elem_size(const Op *op, int arg)
{
	return (int)dataflow_datatype_size(op->skeleton.arg_dtypes[arg]);
}

/* Elementwise (grid-stride, one thread per element): add, scale, cast, set_mem, adamw_step over
 * n, rope and rope_bwd over (token, pair), swiglu and swiglu_bwd, rms_norm_bwd_w_reduce over
 * columns. */
LAUNCH_WITH(add, Dataflow_Add_Args, cuda_elementwise_config(a.n, c))
LAUNCH_WITH(scale, Dataflow_Scale_Args, cuda_elementwise_config(a.n, c))
LAUNCH_WITH(cast, Dataflow_Cast_Args, cuda_elementwise_config(a.n, c))
LAUNCH_WITH(set_mem, Dataflow_Set_Mem_Args, cuda_elementwise_config(a.n, c))
LAUNCH_WITH(adamw_step, Dataflow_Adamw_Step_Args, cuda_elementwise_config(a.n, c))
LAUNCH_WITH(rope, Dataflow_Rope_Args, cuda_elementwise_config(a.num_tokens * (a.head_dim / 2), c))
LAUNCH_WITH(rope_bwd, Dataflow_Rope_Bwd_Args, cuda_elementwise_config(a.num_tokens * (a.head_dim / 2), c))
LAUNCH_WITH(swiglu, Dataflow_Swiglu_Args, cuda_elementwise_config(a.rows * a.ffn, c))
LAUNCH_WITH(swiglu_bwd, Dataflow_Swiglu_Bwd_Args, cuda_elementwise_config(a.rows * a.ffn, c))
LAUNCH_WITH(paged_kv_write, Dataflow_Paged_Kv_Write_Args, cuda_elementwise_config(a.num_tokens * a.num_kv_heads * a.head_dim, c))
LAUNCH_WITH(rms_norm_bwd_w_reduce, Dataflow_Rms_Norm_Bwd_W_Reduce_Args, cuda_elementwise_config(a.hidden, c))
/* 16 threads per DATAFLOW_GRAD_NORM_BLOCK elements */
LAUNCH_WITH(grad_norm_sq_partials, Dataflow_Grad_Norm_Sq_Partials_Args,
	    cuda_elementwise_config((a.n + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK * 16, c))

/* One block per row: embedding (rows of the table), rms_norm, rms_norm_bwd_x, cross_entropy. */
LAUNCH_WITH(embedding, Dataflow_Embedding_Args,
	    cuda_rows_config(a.num_tokens, a.hidden, elem_size(op, DATAFLOW_EMBEDDING_ARG_OUT), c))
LAUNCH_WITH(rms_norm, Dataflow_Rms_Norm_Args, cuda_rows_config(a.rows, a.hidden, elem_size(op, DATAFLOW_RMS_NORM_ARG_X), c))
LAUNCH_WITH(rms_norm_bwd_x, Dataflow_Rms_Norm_Bwd_X_Args,
	    cuda_rows_config(a.rows, a.hidden, elem_size(op, DATAFLOW_RMS_NORM_BWD_X_ARG_X), c))
LAUNCH_WITH(cross_entropy, Dataflow_Cross_Entropy_Args,
	    cuda_rows_config(a.tokens, a.vocab, elem_size(op, DATAFLOW_CROSS_ENTROPY_ARG_LOGITS), c))

/* paged_attention: 4-warp blocks, one per (sequence, kv head, split) for the partials and
 * one per sequence for the combine (grid-stride past CUDA_MAX_GRID) */
static void paged_config(int64_t blocks, Dataflow_Launch_Config *c)
{
	uint32_t grid = (uint32_t)(blocks < 1 ? 1 : blocks > CUDA_MAX_GRID ? CUDA_MAX_GRID : blocks);
	*c = (Dataflow_Launch_Config){{grid, 1, 1}, {128, 1, 1}, 0, 1};
}
LAUNCH_WITH(paged_attention_partial, Dataflow_Paged_Attention_Partial_Args,
	    paged_config(a.batch * a.num_kv_heads * ((a.max_pages * a.page_size + a.split_size - 1) / a.split_size), c))
LAUNCH_WITH(paged_attention_combine, Dataflow_Paged_Attention_Combine_Args, paged_config(a.batch, c))

/* one warp per (token, query head) */
LAUNCH_WITH(attention_bwd_delta, Dataflow_Attention_Bwd_Delta_Args, cuda_warps_config(a.total_tokens * a.num_q_heads, c))

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

/* qmatmul_int8 / qmatmul_int4: 16 threads per output channel and block of 4 rows of x, rounded
 * up to whole warps (qmatmul.cu) */
static void qmatmul_config(int64_t M, int64_t N, Dataflow_Launch_Config *c)
{
	cuda_elementwise_config((N * ((M + 3) / 4) * 16 + 31) / 32 * 32, c);
}
LAUNCH_WITH(qmatmul_int8, Dataflow_Qmatmul_Int8_Args, qmatmul_config(a.M, a.N, c))
LAUNCH_WITH(qmatmul_int4, Dataflow_Qmatmul_Int4_Args, qmatmul_config(a.M, a.N, c))

/* ---- mixture of experts (kernels/moe_*.cu) ---- */

/* one thread per token: the router, its backward, the aux loss's backward; one per expert: the stats */
LAUNCH_WITH(moe_router, Dataflow_Moe_Router_Args, cuda_elementwise_config(a.tokens, c))
LAUNCH_WITH(moe_router_bwd, Dataflow_Moe_Router_Bwd_Args, cuda_elementwise_config(a.tokens, c))
LAUNCH_WITH(moe_aux_loss_bwd, Dataflow_Moe_Aux_Loss_Bwd_Args, cuda_elementwise_config(a.tokens, c))
LAUNCH_WITH(moe_router_stats, Dataflow_Moe_Router_Stats_Args, cuda_elementwise_config(a.experts, c))
/* one element per thread; one warp per (token, j) */
LAUNCH_WITH(moe_combine, Dataflow_Moe_Combine_Args, cuda_elementwise_config(a.tokens * a.hidden, c))
LAUNCH_WITH(moe_combine_bwd, Dataflow_Moe_Combine_Bwd_Args, cuda_warps_config(a.tokens * a.top_k, c))

/* one thread: the loss is one number */
LAUNCH(moe_aux_loss)
{
	(void)handle, (void)op_state, (void)op;
	*c = (Dataflow_Launch_Config){{1, 1, 1}, {1, 1, 1}, 0, 1};
	return DATAFLOW_OK;
}

/* one block: each thread owns experts (moe_permute.cu) */
LAUNCH(moe_permute_index)
{
	(void)handle, (void)op_state, (void)op;
	*c = (Dataflow_Launch_Config){{1, 1, 1}, {256, 1, 1}, 0, 1};
	return DATAFLOW_OK;
}

/* 16 x 16 output tiles (moe_grouped_matmul.cu): grid (columns, rows) for the forward, (k_in,
 * n_out, experts) for the weight gradient */
#define MOE_TILE 16
static Dataflow_Status moe_grid(int64_t x, int64_t y, int64_t z, const char *op, Dataflow_Launch_Config *c)
{
	x = (x + MOE_TILE - 1) / MOE_TILE, y = (y + MOE_TILE - 1) / MOE_TILE;
	if (x > 0x7fffffff || y > 65535 || z > 65535)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED, "%s: %lld x %lld x %lld tiles exceed the CUDA grid",
					  op, (long long)x, (long long)y, (long long)z);
	*c = (Dataflow_Launch_Config){{(uint32_t)x, (uint32_t)y, (uint32_t)z}, {MOE_TILE, MOE_TILE, 1}, 0, 1};
	return DATAFLOW_OK;
}

LAUNCH(moe_grouped_matmul)
{
	(void)handle, (void)op_state;
	Dataflow_Moe_Grouped_Matmul_Args a = dataflow_moe_grouped_matmul_args(op->op_args);
	return moe_grid(a.n_out, a.rows, 1, "moe_grouped_matmul", c);
}

LAUNCH(moe_grouped_matmul_bwd_w)
{
	(void)handle, (void)op_state;
	Dataflow_Moe_Grouped_Matmul_Bwd_W_Args a = dataflow_moe_grouped_matmul_bwd_w_args(op->op_args);
	return moe_grid(a.k_in, a.n_out, a.experts, "moe_grouped_matmul_bwd_w", c);
}
