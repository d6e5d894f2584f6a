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

/* The standard launch classes (the catalogue's `launch`; the last arguments, the catalogue's
 * texts of the parameters, are for messages and unused here):
 *   elementwise(items)                   grid-stride, one thread per item
 *   rows(rows, row_elems, vector_arg)    one block per row, a 16-byte vector of vector_arg's
 *                                        elements per thread
 *   warps(warps)                         one warp per item, 8-warp blocks
 *   block(threads)                       one block of that many threads */
#define CUDA_ELEMENTWISE(OP, TYPE, ITEMS, ...) LAUNCH_WITH(OP, TYPE, cuda_elementwise_config(ITEMS, c))
#define CUDA_ROWS(OP, TYPE, ROWS, ROW_ELEMS, VECTOR_ARG, ...) \
	LAUNCH_WITH(OP, TYPE, cuda_rows_config(ROWS, ROW_ELEMS, elem_size(op, VECTOR_ARG), c))
#define CUDA_WARPS(OP, TYPE, WARPS, ...) LAUNCH_WITH(OP, TYPE, cuda_warps_config(WARPS, c))
#define CUDA_BLOCK(OP, TYPE, THREADS, ...)                                     \
	LAUNCH(OP)                                                             \
	{                                                                      \
		(void)handle, (void)op_state, (void)op;                        \
		*c = (Dataflow_Launch_Config){{1, 1, 1}, {THREADS, 1, 1}, 0, 1}; \
		return DATAFLOW_OK;                                            \
	}
#include "dataflow/cuda_launches.inc"

/* adamw_step_8bit (elementwise over n): a thread block per quantization block */
_Static_assert(CUDA_ELEMENTWISE_BLOCK == DATAFLOW_ADAMW_8BIT_BLOCK, "adamw_step_8bit: a thread per element of a block");

/* The custom launches. */

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

/* qmatmul_int8 / qmatmul_int4: 16 threads per output channel and block of 4 rows of x, rounded
 * up to whole warps (qmatmul.cu) */
static void qmatmul_config(int64_t M, int64_t N, Dataflow_Launch_Config *c)
{
	cuda_elementwise_config((N * ((M + 3) / 4) * 16 + 31) / 32 * 32, c);
}
LAUNCH_WITH(qmatmul_int8, Dataflow_Qmatmul_Int8_Args, qmatmul_config(a.M, a.N, c))
LAUNCH_WITH(qmatmul_int4, Dataflow_Qmatmul_Int4_Args, qmatmul_config(a.M, a.N, c))

/* ---- mixture of experts (kernels/moe_*.cu) ---- */

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
