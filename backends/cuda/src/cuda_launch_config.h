#ifndef DATAFLOW_CUDA_LAUNCH_CONFIG_H
#define DATAFLOW_CUDA_LAUNCH_CONFIG_H

/* Launch geometry of the CUDA default ops and the choice of attention implementation: pure
 * functions of shapes and device limits (no driver calls), unit-tested on the host without a
 * GPU (tests/c/test_cuda_launch.c). Reductions inside the kernels follow the block size, so
 * these choices depend on the shapes alone: the same shapes give the same bits. */

#include <stdint.h>

#include "dataflow/op_impl.h"

#define CUDA_ELEMENTWISE_BLOCK 256
#define CUDA_MAX_GRID 65535 /* 1-D kernels loop over the rest (grid-stride) */
#define CUDA_COLUMN_BLOCK 256

/* One thread per element; n == 0 gives grid 0 (nothing to launch). */
void cuda_elementwise_config(int64_t n, Dataflow_Launch_Config *c);
/* Threads per block for one block per row of row_elems elements of elem_bytes: one 16-byte
 * vector per thread, a power of two in [32, 1024]. */
uint32_t cuda_row_threads(int64_t row_elems, int elem_bytes);
/* One block of cuda_row_threads per row (grid-stride past CUDA_MAX_GRID rows). */
void cuda_rows_config(int64_t rows, int64_t row_elems, int elem_bytes, Dataflow_Launch_Config *c);
/* grid (column groups of CUDA_COLUMN_BLOCK, y_blocks); 0 when y_blocks exceeds the grid's y
 * limit (the caller reports it). */
int cuda_columns_config(int64_t cols, int64_t y_blocks, Dataflow_Launch_Config *c);
/* warps_needed warps of 8-warp blocks (grid-stride past CUDA_MAX_GRID blocks). */
void cuda_warps_config(int64_t warps_needed, Dataflow_Launch_Config *c);

/* ---- attention ---- */

typedef enum { CUDA_ATTN_SIMT = 0, CUDA_ATTN_MMA = 1, CUDA_ATTN_CUDNN = 2 } Cuda_Attn_Impl;
typedef enum { CUDA_ATTN_FWD = 0, CUDA_ATTN_DKDV = 1, CUDA_ATTN_DQ = 2 } Cuda_Attn_Kernel;

/* cuDNN versions (cudnnGetVersion) whose backend API has what the external path uses: the
 * SDPA forward operation, the backward one, and the score-modifier subgraph with the diagonal
 * band mask (causal). */
#define CUDA_CUDNN_SDPA_FWD 91300
#define CUDA_CUDNN_SDPA_BWD 91700
#define CUDA_CUDNN_SDPA_CAUSAL 92100

typedef struct {
	int cc;             /* compute capability, major * 10 + minor */
	int max_smem;       /* opt-in shared memory per block, bytes */
	int elem_bytes;     /* 4: fp32, 2: fp16 or bf16 */
	int64_t head_dim;
	int64_t num_seqs;
	int causal;
	int64_t window;     /* sliding window; 0: none */
	int kv;             /* attention_kv: keys in their own sequences */
	int backward;
	int vec;            /* head_dim % 8 == 0 and every tensor 16-byte aligned */
	int cudnn_version;  /* 0 when cuDNN is not loaded */
	int force;          /* -1: automatic; else the Cuda_Attn_Impl asked for (DATAFLOW_CUDA_ATTENTION) */
} Cuda_Attn_Problem;

typedef struct {
	Cuda_Attn_Impl impl;
	int hd;             /* head-dim bucket of the MMA kernels (64, 128, 256), 0 otherwise */
	const char *reason; /* why, for logs and tests */
} Cuda_Attn_Choice;

typedef struct {
	int hd, bm, bn, nw, dsplit;
	int smem; /* bytes of dynamic shared memory */
} Cuda_Attn_Tile;

/* cuDNN where it is asked for or automatic and supports the problem, else the tensor-core
 * kernels where they apply (sm_80+, fp16/bf16, head_dim <= 256, shared memory fits), else the
 * SIMT kernels. */
Cuda_Attn_Choice cuda_attention_choose(const Cuda_Attn_Problem *p);
/* The head-dim bucket of the MMA kernels: 64, 128 or 256 (0 past 256). */
int cuda_attention_bucket(int64_t head_dim);
/* The tile shape of a kernel at a bucket (attention_params.cuh); 0 if there is none. */
int cuda_attention_tile(Cuda_Attn_Kernel kernel, int hd, Cuda_Attn_Tile *t);
/* An upper bound of the number of blocks of `block` tokens over packed sequences of `total`
 * tokens in all (sum of ceil(L_s / block) <= total / block + number of non-empty sequences). */
int64_t cuda_attention_blocks(int64_t total, int64_t num_seqs, int64_t block);
/* The parse of DATAFLOW_CUDA_ATTENTION: "cudnn", "native" (MMA), "simt", or anything else
 * (unset, "auto"): -1. */
int cuda_attention_force(const char *value);

#endif
