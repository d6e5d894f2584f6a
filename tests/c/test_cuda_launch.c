/* The CUDA backend's launch geometry and attention choice (backends/cuda/src/cuda_launch_config.c),
 * on the host: no GPU, no driver. Each check compares with values worked out by hand from the
 * kernels' expectations (backends/cuda/kernels) and the tile table (attention_params.cuh). */
#include <stdio.h>
#include <string.h>

#include "attention_params.cuh"
#include "cuda_launch_config.h"

#include "c_test.h"

static void test_elementwise_and_rows(void)
{
	Dataflow_Launch_Config c;
	cuda_elementwise_config(0, &c);
	EXPECT_TRUE(c.grid[0] == 0);
	cuda_elementwise_config(1, &c);
	EXPECT_TRUE(c.grid[0] == 1 && c.block[0] == 256 && c.grid[1] == 1 && c.shared_mem_bytes == 0);
	cuda_elementwise_config(257, &c);
	EXPECT_TRUE(c.grid[0] == 2);
	cuda_elementwise_config((int64_t)1 << 40, &c); /* grid-stride past the cap */
	EXPECT_TRUE(c.grid[0] == CUDA_MAX_GRID);

	/* one 16-byte vector per thread, a power of two in [32, 1024] */
	EXPECT_TRUE(cuda_row_threads(2048, 2) == 256);  /* 2048 bf16 = 256 vectors */
	EXPECT_TRUE(cuda_row_threads(2048, 4) == 512);
	EXPECT_TRUE(cuda_row_threads(1, 4) == 32);
	EXPECT_TRUE(cuda_row_threads(100, 2) == 32);    /* 13 vectors */
	EXPECT_TRUE(cuda_row_threads(131072, 2) == 1024); /* a 128k vocabulary row */
	EXPECT_TRUE(cuda_row_threads(4100, 2) == 1024); /* 513 vectors: the next power of two */
	cuda_rows_config(70000, 2048, 2, &c);
	EXPECT_TRUE(c.grid[0] == CUDA_MAX_GRID && c.block[0] == 256);
	cuda_rows_config(3, 20, 4, &c);
	EXPECT_TRUE(c.grid[0] == 3 && c.block[0] == 32);
	for (int64_t n = 1; n < 5000; n += 37) { /* always a multiple of 32 (the reductions need it) */
		uint32_t t = cuda_row_threads(n, 2);
		EXPECT_TRUE(t % 32 == 0 && t >= 32 && t <= 1024 && (t & (t - 1)) == 0);
	}
}

static void test_columns_and_warps(void)
{
	Dataflow_Launch_Config c;
	EXPECT_TRUE(cuda_columns_config(2048, 64, &c) && c.grid[0] == 8 && c.grid[1] == 64 && c.block[0] == 256);
	EXPECT_TRUE(cuda_columns_config(1, 1, &c) && c.grid[0] == 1);
	EXPECT_TRUE(!cuda_columns_config(10, 65536, &c));
	cuda_warps_config(17, &c); /* 8 warps per block */
	EXPECT_TRUE(c.grid[0] == 3 && c.block[0] == 256);
}

static void test_tiles(void)
{
	Cuda_Attn_Tile t;
	static const int hds[] = {64, 128, 256};
	for (int i = 0; i < 3; i++) {
		for (int k = 0; k < 3; k++) {
			EXPECT_TRUE(cuda_attention_tile((Cuda_Attn_Kernel)k, hds[i], &t));
			EXPECT_TRUE(t.hd == hds[i]);
			/* 16 rows per group of dsplit warps: the row dimension of the block */
			int rows = k == CUDA_ATTN_DKDV ? t.bn : t.bm;
			EXPECT_TRUE(rows == 16 * t.nw / t.dsplit);
			EXPECT_TRUE(t.bm % 16 == 0 && t.bn % 16 == 0 && (t.hd / t.dsplit) % 16 == 0);
			EXPECT_TRUE(t.smem <= 227 * 1024); /* Hopper's opt-in limit */
		}
	}
	EXPECT_TRUE(!cuda_attention_tile(CUDA_ATTN_FWD, 96, &t));
	EXPECT_TRUE(cuda_attention_tile(CUDA_ATTN_FWD, 64, &t) && t.smem == 2 * 64 * (128 + 4 * 64)); /* Q + 2 x (K, V) */
	EXPECT_TRUE(cuda_attention_tile(CUDA_ATTN_DKDV, 128, &t) && t.smem == 2 * 128 * (2 * 64 + 4 * 32) + 16 * 32);
	EXPECT_TRUE(cuda_attention_bucket(1) == 64 && cuda_attention_bucket(64) == 64 && cuda_attention_bucket(65) == 128);
	EXPECT_TRUE(cuda_attention_bucket(256) == 256 && cuda_attention_bucket(257) == 0);
	/* blocks over packed sequences: sum of ceil(L / B) <= T / B + #sequences */
	EXPECT_TRUE(cuda_attention_blocks(8192, 1, 128) == 65);
	EXPECT_TRUE(cuda_attention_blocks(5, 10, 64) == 5);
	static const int lengths[] = {1, 7, 33, 64, 5, 130, 0, 128};
	int64_t total = 0, exact = 0;
	for (int i = 0; i < 8; i++) {
		total += lengths[i];
		exact += (lengths[i] + 63) / 64;
	}
	EXPECT_TRUE(cuda_attention_blocks(total, 8, 64) >= exact);
}

static Cuda_Attn_Problem h100_bf16(void)
{
	return (Cuda_Attn_Problem){.cc = 90, .max_smem = 227 * 1024, .elem_bytes = 2, .head_dim = 128,
				   .num_seqs = 1, .causal = 1, .vec = 1, .cudnn_version = 0, .force = -1};
}

static void test_choice(void)
{
	Cuda_Attn_Problem p = h100_bf16();
	Cuda_Attn_Choice c = cuda_attention_choose(&p);
	EXPECT_TRUE(c.impl == CUDA_ATTN_MMA && c.hd == 128);
	p.cudnn_version = 92800; /* causal forward needs the subgraph (9.21) */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_CUDNN);
	p.cudnn_version = 91900;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.causal = 0; /* non-causal forward: 9.13 */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_CUDNN);
	p.backward = 1; /* non-causal backward: 9.17 */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_CUDNN);
	p.cudnn_version = 91600;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);

	p = h100_bf16();
	p.cudnn_version = 92800;
	p.num_seqs = 4; /* packed sequences: native */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.num_seqs = 1;
	p.kv = 1; /* attention_kv: native */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.kv = 0;
	p.window = 4096; /* a sliding window: native */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.window = 0;
	p.vec = 0; /* misaligned or head_dim % 8: native, whose loader handles it */
	c = cuda_attention_choose(&p);
	EXPECT_TRUE(c.impl == CUDA_ATTN_MMA && c.hd == 128);
	p.vec = 1;
	p.head_dim = 256; /* cuDNN path up to 128 */
	c = cuda_attention_choose(&p);
	EXPECT_TRUE(c.impl == CUDA_ATTN_MMA && c.hd == 256);
	p.head_dim = 20;
	p.vec = 0; /* head_dim % 8 != 0 */
	c = cuda_attention_choose(&p);
	EXPECT_TRUE(c.impl == CUDA_ATTN_MMA && c.hd == 64);

	/* forcing */
	p = h100_bf16();
	p.cudnn_version = 92800;
	p.force = CUDA_ATTN_MMA;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.force = CUDA_ATTN_SIMT;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_SIMT);
	p.force = CUDA_ATTN_CUDNN;
	p.num_seqs = 3; /* cuDNN cannot: the native kernels */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	EXPECT_TRUE(cuda_attention_force("cudnn") == CUDA_ATTN_CUDNN && cuda_attention_force("native") == CUDA_ATTN_MMA);
	EXPECT_TRUE(cuda_attention_force("simt") == CUDA_ATTN_SIMT && cuda_attention_force(NULL) == -1);
	EXPECT_TRUE(cuda_attention_force("auto") == -1);

	/* fp32, older GPUs, small shared memory: SIMT */
	p = h100_bf16();
	p.elem_bytes = 4;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_SIMT);
	p = h100_bf16();
	p.cc = 75;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_SIMT);
	p = h100_bf16();
	p.cc = 86;
	p.max_smem = 99 * 1024; /* sm_86: the d256 backward tiles (128 KiB) do not fit */
	p.head_dim = 256;
	p.backward = 1;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_SIMT);
	p.backward = 0; /* the d256 forward (96 KiB) does */
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_MMA);
	p.head_dim = 300;
	EXPECT_TRUE(cuda_attention_choose(&p).impl == CUDA_ATTN_SIMT);
}

int main(void)
{
	test_elementwise_and_rows();
	test_columns_and_warps();
	test_tiles();
	test_choice();
	return *c_test_failures() != 0;
}
