#include <string.h>

#include "attention_params.cuh"
#include "cuda_launch_config.h"

static uint32_t min_grid(int64_t blocks)
{
	return (uint32_t)(blocks < CUDA_MAX_GRID ? blocks : CUDA_MAX_GRID);
}

static void set(Dataflow_Launch_Config *c, uint32_t gx, uint32_t gy, uint32_t block, uint32_t smem)
{
	c->grid[0] = gx;
	c->grid[1] = gy;
	c->grid[2] = 1;
	c->block[0] = block;
	c->block[1] = c->block[2] = 1;
	c->shared_mem_bytes = smem;
}

void cuda_elementwise_config(int64_t n, Dataflow_Launch_Config *c)
{
	set(c, n > 0 ? min_grid((n + CUDA_ELEMENTWISE_BLOCK - 1) / CUDA_ELEMENTWISE_BLOCK) : 0, 1,
	    CUDA_ELEMENTWISE_BLOCK, 0);
}

uint32_t cuda_row_threads(int64_t row_elems, int elem_bytes)
{
	int64_t vectors = (row_elems * elem_bytes + 15) / 16;
	uint32_t t = 32;
	while (t < 1024 && t < vectors)
		t *= 2;
	return t;
}

void cuda_rows_config(int64_t rows, int64_t row_elems, int elem_bytes, Dataflow_Launch_Config *c)
{
	set(c, rows > 0 ? min_grid(rows) : 0, 1, cuda_row_threads(row_elems, elem_bytes), 0);
}

int cuda_columns_config(int64_t cols, int64_t y_blocks, Dataflow_Launch_Config *c)
{
	int64_t x = (cols + CUDA_COLUMN_BLOCK - 1) / CUDA_COLUMN_BLOCK;
	if (y_blocks > 65535 || x > 2147483647)
		return 0;
	set(c, (uint32_t)x, (uint32_t)y_blocks, CUDA_COLUMN_BLOCK, 0);
	return 1;
}

void cuda_warps_config(int64_t warps_needed, Dataflow_Launch_Config *c)
{
	set(c, warps_needed > 0 ? min_grid((warps_needed + 7) / 8) : 0, 1, 256, 0);
}

/* ---- attention ---- */

int cuda_attention_bucket(int64_t head_dim)
{
	return head_dim <= 64 ? 64 : head_dim <= 128 ? 128 : head_dim <= 256 ? 256 : 0;
}

int cuda_attention_tile(Cuda_Attn_Kernel kernel, int hd, Cuda_Attn_Tile *t)
{
#define TILE(HD, BM, BN, NW, DS, SMEM)                                                     \
	if (hd == HD) {                                                                    \
		*t = (Cuda_Attn_Tile){HD, BM, BN, NW, DS, SMEM(HD, BM, BN)};               \
		return 1;                                                                  \
	}
#define FWD(HD, BM, BN, NW, DS) TILE(HD, BM, BN, NW, DS, ATTN_FWD_SMEM)
#define DKDV(HD, BM, BN, NW, DS) TILE(HD, BM, BN, NW, DS, ATTN_DKDV_SMEM)
#define DQ(HD, BM, BN, NW, DS) TILE(HD, BM, BN, NW, DS, ATTN_DQ_SMEM)
	switch (kernel) {
	case CUDA_ATTN_FWD:
		ATTN_FWD_TILES(FWD)
		break;
	case CUDA_ATTN_DKDV:
		ATTN_DKDV_TILES(DKDV)
		break;
	case CUDA_ATTN_DQ:
		ATTN_DQ_TILES(DQ)
		break;
	}
#undef FWD
#undef DKDV
#undef DQ
#undef TILE
	return 0;
}

int64_t cuda_attention_blocks(int64_t total, int64_t num_seqs, int64_t block)
{
	return total / block + (num_seqs < total ? num_seqs : total);
}

int cuda_attention_force(const char *value)
{
	if (!value)
		return -1;
	if (!strcmp(value, "cudnn"))
		return CUDA_ATTN_CUDNN;
	if (!strcmp(value, "native"))
		return CUDA_ATTN_MMA;
	if (!strcmp(value, "simt"))
		return CUDA_ATTN_SIMT;
	return -1;
}

static Cuda_Attn_Choice choice(Cuda_Attn_Impl impl, int hd, const char *reason)
{
	return (Cuda_Attn_Choice){impl, impl == CUDA_ATTN_MMA ? hd : 0, reason};
}

/* NULL if cuDNN's SDPA (as cuda_cudnn_sdpa.c drives it) takes the problem, else why not */
static const char *cudnn_unfit(const Cuda_Attn_Problem *p)
{
	if (!p->cudnn_version)
		return "cuDNN not loaded";
	if (p->kv)
		return "attention_kv runs natively (cuDNN's causal diagonal is top-left)";
	if (p->window)
		return "a sliding window runs natively (the path builds a causal band only)";
	if (p->elem_bytes != 2 || p->cc < 80)
		return "cuDNN SDPA needs fp16/bf16 on sm_80+";
	if (p->num_seqs != 1)
		return "cuDNN path takes one sequence per call";
	if (!p->vec || p->head_dim > 128)
		return "cuDNN path needs head_dim % 8 == 0, <= 128 and 16-byte aligned tensors";
	int need = p->backward ? CUDA_CUDNN_SDPA_BWD : CUDA_CUDNN_SDPA_FWD;
	if (p->causal && need < CUDA_CUDNN_SDPA_CAUSAL)
		need = CUDA_CUDNN_SDPA_CAUSAL;
	if (p->cudnn_version < need)
		return "cuDNN too old for this SDPA";
	return NULL;
}

static int mma_fits(const Cuda_Attn_Problem *p, int hd)
{
	Cuda_Attn_Tile t;
	if (p->cc < 80 || p->elem_bytes != 2 || !hd)
		return 0;
	if (!p->backward)
		return cuda_attention_tile(CUDA_ATTN_FWD, hd, &t) && t.smem <= p->max_smem;
	return cuda_attention_tile(CUDA_ATTN_DKDV, hd, &t) && t.smem <= p->max_smem &&
	       cuda_attention_tile(CUDA_ATTN_DQ, hd, &t) && t.smem <= p->max_smem;
}

Cuda_Attn_Choice cuda_attention_choose(const Cuda_Attn_Problem *p)
{
	const int hd = cuda_attention_bucket(p->head_dim);
	if (p->force == CUDA_ATTN_SIMT)
		return choice(CUDA_ATTN_SIMT, 0, "forced (DATAFLOW_CUDA_ATTENTION=simt)");
	if (p->force != CUDA_ATTN_MMA && !cudnn_unfit(p))
		return choice(CUDA_ATTN_CUDNN, 0, p->force == CUDA_ATTN_CUDNN ? "forced (DATAFLOW_CUDA_ATTENTION=cudnn)"
									  : "cuDNN fused SDPA");
	if (mma_fits(p, hd))
		return choice(CUDA_ATTN_MMA, hd, "tensor-core kernels");
	if (p->elem_bytes != 2)
		return choice(CUDA_ATTN_SIMT, 0, "fp32: SIMT kernels");
	return choice(CUDA_ATTN_SIMT, 0, p->cc < 80 ? "before sm_80: SIMT kernels" : "shared memory too small: SIMT kernels");
}
