/* The attention kernels' one parameter block and tile shapes, shared by the kernels (CUDA C++)
 * and the host code that launches them (C: backends/cuda/src/cuda_attention*.c), so both
 * sides agree on the layout and the shared-memory sizes. Plain C: no CUDA keywords here.
 *
 * Layout (as the catalogue's attention ops): Q, out, dQ, dout [total_q][num_q_heads][head_dim];
 * K, V, dK, dV [total_k][num_kv_heads][head_dim] (dK, dV fp32 when accumulate); lse and D fp32
 * [num_q_heads][total_q];
 * cu_q, cu_k int32 [num_seqs + 1] (untrusted device data). */
#ifndef DATAFLOW_CUDA_ATTENTION_PARAMS_CUH
#define DATAFLOW_CUDA_ATTENTION_PARAMS_CUH

typedef struct {
	const void *q, *k, *v;
	const int *cu_q, *cu_k;
	void *out; /* forward: written; backward: the forward's output (read by cuDNN's backward) */
	float *lse;
	const void *dout;
	const float *lse_in, *D;
	void *dq, *dk, *dv;
	long long total_q, total_k, num_seqs, num_q_heads, num_kv_heads, head_dim;
	float scale;      /* softmax scale */
	float scale_log2; /* scale * log2(e): scores are exponentiated in base 2 */
	int causal;
	long long window; /* sliding window (causal only): query position i sees keys j > i - window; 0: none */
	int accumulate; /* attention_kv_bwd: dK, dV are fp32 and added into */
	int vec; /* head_dim % 8 == 0 and every tensor 16-byte aligned: tiles move by cp.async */
	const int *skip; /* device flag, may be NULL: when it is 1 the kernel does nothing (cuDNN's
			  * result stands, see attn_cudnn_check) */
} Attn_Params;

/* Tensor-core (mma.sync m16n8k16, sm_80+) tile shapes per head-dimension bucket HD (head_dim
 * is zero-padded up to it): X(HD, BM, BN, NW, DSPLIT) with
 *   forward:  BM queries per block (16 per warp), BN keys per step, NW warps
 *   dK/dV:    BN keys per block (16 per warp group of DSPLIT warps), BM queries per step
 *   dQ:       BM queries per block (16 per warp group), BN keys per step
 * DSPLIT warps share 16 rows, each owning HD / DSPLIT accumulator columns (HD = 256 keeps
 * the accumulators in registers that way). */
#define ATTN_FWD_TILES(X) X(64, 128, 64, 8, 1) X(128, 128, 64, 8, 1) X(256, 64, 32, 4, 1)
#define ATTN_DKDV_TILES(X) X(64, 64, 64, 4, 1) X(128, 32, 64, 4, 1) X(256, 32, 64, 8, 2)
#define ATTN_DQ_TILES(X) X(64, 64, 64, 4, 1) X(128, 64, 32, 4, 1) X(256, 64, 32, 8, 2)

/* Blocks per SM each tensor-core kernel is compiled for (__launch_bounds__' second argument):
 * ptxas keeps its registers within 65536 / (blocks * NW * 32). The forward at d64 and d128
 * (8 warps) fits two blocks, so one block's softmax overlaps the other's mma (NVRTC 13.0 gave
 * 167 and 186 registers unbounded: one block per SM); the backward's 4-warp kernels fit two
 * blocks within 255 registers anyway; d256 keeps one. */
#define ATTN_FWD_MIN_BLOCKS(HD) ((HD) <= 128 ? 2 : 1)
#define ATTN_DQ_MIN_BLOCKS(HD) ((HD) <= 128 ? 3 : 1)
#define ATTN_DKDV_MIN_BLOCKS(HD) 1

/* Shared memory in bytes (16-bit elements):
 *   forward: Q [BM][HD] + K, V [2][BN][HD]
 *   dK/dV:   K, V [BN][HD] + Q, dO [2][BM][HD] + lse, D [2][BM] fp32
 *   dQ:      Q, dO [BM][HD] + K, V [2][BN][HD] */
#define ATTN_FWD_SMEM(HD, BM, BN) (2 * (HD) * ((BM) + 4 * (BN)))
#define ATTN_DKDV_SMEM(HD, BM, BN) (2 * (HD) * (2 * (BN) + 4 * (BM)) + 16 * (BM))
#define ATTN_DQ_SMEM(HD, BM, BN) (2 * (HD) * (2 * (BM) + 4 * (BN)))

/* The SIMT kernels (any dtype, any head_dim up to 256, any arch): one warp per query row
 * (forward, dQ) or key row (dK/dV), ATTN_SIMT_WARPS warps per block. */
#define ATTN_SIMT_WARPS 4
#define ATTN_SIMT_MAX_PER_LANE 8 /* head_dim <= 32 * 8 */

#endif
