/* The CUDA launch functions generated from the catalogue's launch classes (gen_ops.py's
 * cuda_launches.inc, defined by backends/cuda/src/cuda_default_launch.c), on the host: the grid
 * each class gives for an op, against values worked out by hand from the kernels' expectations
 * (one thread per element of 256-thread blocks; a block per row of a 16-byte vector per thread;
 * 8-warp blocks; one block). */
#include <string.h>

#include "cuda_launch_config.h"
#include "dataflow/default_ops.h"
#include "dataflow/op_args.h"

#include "c_test.h"

Dataflow_Status dataflow_cuda_add_launch(Dataflow_Handle *, const Op *, void *, Dataflow_Launch_Config *);
Dataflow_Status dataflow_cuda_rms_norm_launch(Dataflow_Handle *, const Op *, void *, Dataflow_Launch_Config *);
Dataflow_Status dataflow_cuda_cross_entropy_launch(Dataflow_Handle *, const Op *, void *, Dataflow_Launch_Config *);
Dataflow_Status dataflow_cuda_grad_norm_sq_partials_launch(Dataflow_Handle *, const Op *, void *,
							   Dataflow_Launch_Config *);
Dataflow_Status dataflow_cuda_moe_combine_bwd_launch(Dataflow_Handle *, const Op *, void *, Dataflow_Launch_Config *);
Dataflow_Status dataflow_cuda_moe_permute_index_launch(Dataflow_Handle *, const Op *, void *, Dataflow_Launch_Config *);

static int same(Dataflow_Launch_Config c, uint32_t grid, uint32_t block)
{
	return c.grid[0] == grid && c.grid[1] == 1 && c.grid[2] == 1 && c.block[0] == block && c.block[1] == 1 &&
	       c.block[2] == 1 && c.shared_mem_bytes == 0;
}

static void test_elementwise(void)
{
	Op op = {0};
	Dataflow_Add_Args a = {.n = 1000};
	dataflow_add_arg_pointers(&a, op.op_args);
	Dataflow_Launch_Config c;
	EXPECT_TRUE(dataflow_cuda_add_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 4, 256));
	a.n = (int64_t)1 << 40; /* grid-stride past the cap */
	EXPECT_TRUE(dataflow_cuda_add_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, CUDA_MAX_GRID, 256));

	/* 16 threads per DATAFLOW_GRAD_NORM_BLOCK elements: 3 blocks and one element, 64 threads */
	Dataflow_Grad_Norm_Sq_Partials_Args g = {.n = 3 * DATAFLOW_GRAD_NORM_BLOCK + 1};
	dataflow_grad_norm_sq_partials_arg_pointers(&g, op.op_args);
	EXPECT_TRUE(dataflow_cuda_grad_norm_sq_partials_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 1, 256));
	g.n = 200 * (int64_t)DATAFLOW_GRAD_NORM_BLOCK; /* 3200 threads */
	EXPECT_TRUE(dataflow_cuda_grad_norm_sq_partials_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 13, 256));
}

static void test_rows(void)
{
	Op op = {0};
	Dataflow_Rms_Norm_Args r = {.rows = 3, .hidden = 2048};
	dataflow_rms_norm_arg_pointers(&r, op.op_args);
	Dataflow_Launch_Config c;
	/* the vector width follows x's dtype: 2048 bf16 are 256 vectors, 2048 fp32 512 */
	op.skeleton.arg_dtypes[DATAFLOW_RMS_NORM_ARG_X] = DATAFLOW_BF16;
	EXPECT_TRUE(dataflow_cuda_rms_norm_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 3, 256));
	op.skeleton.arg_dtypes[DATAFLOW_RMS_NORM_ARG_X] = DATAFLOW_FP32;
	EXPECT_TRUE(dataflow_cuda_rms_norm_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 3, 512));

	/* cross_entropy: a block per token over the vocabulary, logits setting the width */
	memset(&op, 0, sizeof(op));
	Dataflow_Cross_Entropy_Args x = {.tokens = 70000, .vocab = 131072};
	dataflow_cross_entropy_arg_pointers(&x, op.op_args);
	op.skeleton.arg_dtypes[DATAFLOW_CROSS_ENTROPY_ARG_LOGITS] = DATAFLOW_BF16;
	EXPECT_TRUE(dataflow_cuda_cross_entropy_launch(NULL, &op, NULL, &c) == DATAFLOW_OK &&
		    same(c, CUDA_MAX_GRID, 1024));
}

static void test_warps_and_block(void)
{
	Op op = {0};
	Dataflow_Moe_Combine_Bwd_Args m = {.tokens = 100, .top_k = 2}; /* 200 warps of 8-warp blocks */
	dataflow_moe_combine_bwd_arg_pointers(&m, op.op_args);
	Dataflow_Launch_Config c;
	EXPECT_TRUE(dataflow_cuda_moe_combine_bwd_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 25, 256));
	EXPECT_TRUE(dataflow_cuda_moe_permute_index_launch(NULL, &op, NULL, &c) == DATAFLOW_OK && same(c, 1, 256));
}

int main(void)
{
	test_elementwise();
	test_rows();
	test_warps_and_block();
	return *c_test_failures() != 0;
}
