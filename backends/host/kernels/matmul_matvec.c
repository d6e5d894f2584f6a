/* Host matmul's decode path: D = alpha * A @ B^T + beta * C when A has at most
 * MATVEC_MAX_ROWS rows and B is stored [N, K] (a linear layer's weight, trans_b), fp32 or
 * bf16 (C and D fp32 or bf16).
 *
 * Why not oneDNN here: one decode step reads every weight once for one token per sequence,
 * so it is bound by memory, and oneDNN's matmul for M = 1 (3.x, bf16 and fp32) moved 8-14 GB/s
 * of weights on the 2-core test machine, this pass 18-24 GB/s (best calls, same shapes). The sum is lanes16.h's (the same bits on every ISA, and a row's result does not depend
 * on the other rows of A, so a batch of sequences decodes as each would alone); alpha, then
 * beta * C, are applied in fp32 and the result rounded once to D's dtype.
 *
 * Threads: the handle's compute threads, on the calling stream worker's OpenMP team (the one
 * oneDNN runs on), over runs of output channels; built without OpenMP, the caller runs them. */
#include <stdlib.h>

#include "dataflow/host_kernel.h"
#include "lanes16.h"
#include "matmul.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define PART_MIN_MACS 65536 /* below this, waking another thread costs more than it saves */

/* weight rows interleaved per pass (independent accumulators: FMA latency hidden), within the
 * registers: AVX-512 4 rows x 4 rows of A x 1 zmm, AVX2 2 x 4 x 2 ymm */
enum { ROWS_avx512 = 4, ROWS_avx2 = 2, ROWS_scalar = 1 };
#define NV(isa) (LANES / VL_##isa)

int matmul_matvec_applies(const Matmul_Args *x)
{
	int float_in = x->in_dtype == DATAFLOW_FP32 || x->in_dtype == DATAFLOW_BF16;
	int float_out = x->out_dtype == DATAFLOW_FP32 || x->out_dtype == DATAFLOW_BF16;
	return x->M <= MATVEC_MAX_ROWS && !x->trans_a && x->trans_b && float_in && float_out;
}

/* D[m, n] = alpha * sum + beta * C[m, n], rounded once */
SIMD_INLINE void store_out(const Matmul_Args *x, int64_t m, int64_t n, float sum, DataflowDatatype odt)
{
	float r = x->alpha * sum;
	if (x->beta != 0.0f)
		r += x->beta * simd_load1(x->C, m * x->N + n, odt);
	simd_store1(x->D, m * x->N + n, r, odt);
}

#define MATVEC_PATH(isa)                                                                                   \
	/* weight rows [n, n + rows) against every row of A */                                              \
	SIMD_ISA_INLINE(isa) void rows_##isa(const Matmul_Args *x, const float *a, int64_t n, int rows,        \
					     DataflowDatatype idt, DataflowDatatype odt)                        \
	{                                                                                                  \
		Vf_##isa acc[ROWS_##isa][MATVEC_MAX_ROWS][NV(isa)];                                        \
		int64_t K = x->K, k16 = K / LANES * LANES, M = x->M;                                       \
		for (int c = 0; c < ROWS_##isa; c++)                                                       \
			for (int m = 0; m < MATVEC_MAX_ROWS; m++)                                          \
				for (int j = 0; j < NV(isa); j++)                                          \
					acc[c][m][j] = vset1_##isa(0.0f);                                  \
		for (int64_t k = 0; k < k16; k += LANES)                                                   \
			for (int j = 0; j < NV(isa); j++) {                                                \
				int64_t kj = k + j * VL_##isa;                                             \
				for (int c = 0; c < rows; c++) {                                           \
					Vf_##isa w = vload_##isa(x->B, (n + c) * K + kj, idt);             \
					for (int m = 0; m < M; m++)                                        \
						acc[c][m][j] = vfma_##isa(vloadf_##isa(a + m * K + kj), w, acc[c][m][j]); \
				}                                                                          \
			}                                                                                  \
		for (int c = 0; c < rows; c++)                                                             \
			for (int m = 0; m < M; m++) {                                                      \
				if (k16 == K) {                                                            \
					store_out(x, m, n + c, hsum16_##isa(acc[c][m]), odt);              \
					continue;                                                          \
				}                                                                          \
				float lanes[LANES];                                                        \
				for (int j = 0; j < NV(isa); j++)                                          \
					vstoref_##isa(lanes + j * VL_##isa, acc[c][m][j]);                 \
				for (int64_t k = k16; k < K; k++)                                          \
					lanes[k % LANES] = fmaf(a[m * K + k],                                \
								simd_load1(x->B, (n + c) * K + k, idt),    \
								lanes[k % LANES]);                         \
				store_out(x, m, n + c, tree16(lanes), odt);                                \
			}                                                                                  \
	}                                                                                                  \
	SIMD_ISA_INLINE(isa) void body_##isa(const Matmul_Args *x, const float *a, int64_t n0, int64_t n1,       \
					     DataflowDatatype idt,                                              \
					     DataflowDatatype odt)                                              \
	{                                                                                                  \
		int64_t n = n0;                                                                            \
		for (; n + ROWS_##isa <= n1; n += ROWS_##isa)                                              \
			rows_##isa(x, a, n, ROWS_##isa, idt, odt);                                         \
		for (; n < n1; n++)                                                                        \
			rows_##isa(x, a, n, 1, idt, odt);                                                  \
	}
SIMD_EACH_ISA(MATVEC_PATH)
MATVEC_PATH(scalar)

/* the body for constant dtypes on each path, and the dispatch over them */
#define MATVEC_RUN(iname, oname, I, O)                                                                     \
	SIMD_TARGET_AVX512 static void run_##iname##_##oname##_avx512(const Matmul_Args *x, const float *a, int64_t n0, int64_t n1) \
	{                                                                                                  \
		body_avx512(x, a, n0, n1, I, O);                                                              \
	}                                                                                                  \
	SIMD_TARGET_AVX2 static void run_##iname##_##oname##_avx2(const Matmul_Args *x, const float *a, int64_t n0, int64_t n1) \
	{                                                                                                  \
		body_avx2(x, a, n0, n1, I, O);                                                                \
	}                                                                                                  \
	static void run_##iname##_##oname##_scalar(const Matmul_Args *x, const float *a, int64_t n0, int64_t n1)           \
	{                                                                                                  \
		body_scalar(x, a, n0, n1, I, O);                                                              \
	}                                                                                                  \
	static void run_##iname##_##oname(const Matmul_Args *x, const float *a, int64_t n0, int64_t n1)                    \
	{                                                                                                  \
		SIMD_DISPATCH(run_##iname##_##oname, x, a, n0, n1);                                           \
	}
MATVEC_RUN(fp32, fp32, DATAFLOW_FP32, DATAFLOW_FP32)
MATVEC_RUN(fp32, bf16, DATAFLOW_FP32, DATAFLOW_BF16)
MATVEC_RUN(bf16, fp32, DATAFLOW_BF16, DATAFLOW_FP32)
MATVEC_RUN(bf16, bf16, DATAFLOW_BF16, DATAFLOW_BF16)

static void run_part(const Matmul_Args *x, const float *a, int part, int num_parts)
{
	int64_t n0, n1;
	dataflow_part_range(x->N, part, num_parts, 4, &n0, &n1);
	if (n0 == n1)
		return;
	int out_bf16 = x->out_dtype == DATAFLOW_BF16;
	if (x->in_dtype == DATAFLOW_BF16)
		(out_bf16 ? run_bf16_bf16 : run_bf16_fp32)(x, a, n0, n1);
	else
		(out_bf16 ? run_fp32_bf16 : run_fp32_fp32)(x, a, n0, n1);
}

Dataflow_Status matmul_matvec_run(const Matmul_Args *x)
{
	/* A in fp32 (exact), read once per weight row pass rather than converted each time */
	float *a = NULL;
	if (x->in_dtype != DATAFLOW_FP32) {
		a = malloc((size_t)(x->M * x->K) * sizeof(float));
		if (!a)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
						  "host matmul: no memory for %lld x %lld fp32 rows of A",
						  (long long)x->M, (long long)x->K);
		for (int64_t i = 0; i < x->M * x->K; i++)
			a[i] = simd_load1(x->A, i, x->in_dtype);
	}
	const float *a32 = a ? a : x->A;
	int parts = dataflow_parts_at_most(dataflow_elementwise_parts(x->M * x->N * x->K, PART_MIN_MACS),
					   x->num_threads > 1 ? x->num_threads : 1);
#ifdef _OPENMP
#pragma omp parallel num_threads(parts) if (parts > 1)
	run_part(x, a32, omp_get_thread_num(), omp_get_num_threads());
#else
	for (int part = 0; part < parts; part++)
		run_part(x, a32, part, parts);
#endif
	free(a);
	return DATAFLOW_OK;
}
