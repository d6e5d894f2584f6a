/* Weight-only int8 / int4 dequantize-matmul (qmatmul_int8, qmatmul_int4; contracts in the
 * catalogue): out[m, n] = sum_k x[m, k] * w[n, k] (+ C[m, n]), w = fp32(q - z) * s.
 *
 * The arithmetic is one definition on every path: each weight is dequantized to the fp32
 * product fp32(q - z) * s (exact code, one rounding), and lane l = k mod 16 of a 16-lane fp32
 * accumulator takes fma(x[k], w, acc[l]) in k order; the lanes are then summed in a fixed
 * pairwise tree, C added, and the result rounded once to out's dtype. So a row's result does
 * not depend on M, on the path below, or on the ISA (AVX-512: one 16-lane vector, AVX2: two
 * of 8, scalar: 16 floats), and a batch of sequences decodes as each would alone.
 *
 * Two paths over a part's output channels (n), chosen by M:
 *   decode  (M <= DECODE_MAX_ROWS): matrix-vector, memory-bound (the point of quantization):
 *           each weight chunk is dequantized in registers and used for every row of x;
 *   prefill (larger M): a tile of TILE_N rows of W is dequantized once into an fp32 buffer,
 *           then an MB x TILE_N register-blocked kernel runs over the rows of x.
 * Why not oneDNN: the installed oneDNN (3.2) has no int4 weights and no weight decompression
 * (fpmath apply_to_int came in 3.4/3.5); VNNI needs int8 activations, which weight-only
 * quantization does not have (x stays fp32/bf16), so the vector paths are fp32 FMA. */
#include <math.h>
#include <stdlib.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "lanes16.h"

#define DECODE_MAX_ROWS 4 /* the decode path's rows of x per pass over a weight row */
#define TILE_N 4          /* output channels per part step, and per prefill tile */
#define PART_MIN_MACS 65536

/* One call of either op, unpacked; bits 8: one group per row (group = K), zeros NULL. */
typedef struct {
	int64_t M, N, K, group, groups, row_bytes;
	const void *x, *scales, *C;
	const uint8_t *W, *zeros;
	void *out;
	DataflowDatatype sdt, odt;
} Q_Args;

/* ---- codes of elements [k, k + VL) of a weight row, as fp32 (k is a multiple of VL) ---- */

SIMD_INLINE float vcode_scalar(const uint8_t *row, int64_t k, int bits)
{
	if (bits == 8)
		return (float)(int8_t)row[k];
	return (float)((row[k >> 1] >> ((k & 1) * 4)) & 15);
}

/* the nibbles of the low 8 bytes (low, then high, of each byte) as 16 bytes (SSE2) */
SIMD_INLINE __m128i nibbles_of(__m128i bytes)
{
	__m128i mask = _mm_set1_epi8(15);
	return _mm_unpacklo_epi8(_mm_and_si128(bytes, mask), _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 vcode_avx2(const uint8_t *row, int64_t k, int bits)
{
	if (bits == 8)
		return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k))));
	int32_t four;
	memcpy(&four, row + k / 2, 4);
	return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nibbles_of(_mm_cvtsi32_si128(four))));
}

SIMD_TARGET_AVX512 SIMD_INLINE __m512 vcode_avx512(const uint8_t *row, int64_t k, int bits)
{
	if (bits == 8)
		return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + k))));
	return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(nibbles_of(_mm_loadl_epi64((const __m128i *)(row + k / 2)))));
}

/* ---- weights [k, k + VL) of a row in group (s, z): (code - z) * s ----
 * AVX-512 int4 looks them up: a group's 16 possible weights, computed by the same operations
 * (so the same bits), then one permute per 16 codes instead of a convert, a subtract and a
 * multiply. The other paths compute them; their `table` is unused. */

SIMD_TARGET_AVX512 SIMD_INLINE __m512 vtable_avx512(__m512 s, __m512 z)
{
	__m512i codes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	return (_mm512_cvtepi32_ps(codes) - z) * s;
}

SIMD_TARGET_AVX512 SIMD_INLINE __m512 vweight_avx512(const uint8_t *row, int64_t k, int bits, __m512 s, __m512 z,
						     __m512 table)
{
	if (bits == 8)
		return (vcode_avx512(row, k, bits) - z) * s;
	__m512i codes = _mm512_cvtepu8_epi32(nibbles_of(_mm_loadl_epi64((const __m128i *)(row + k / 2))));
	return _mm512_permutexvar_ps(codes, table);
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 vtable_avx2(__m256 s, __m256 z)
{
	(void)z;
	return s;
}

SIMD_TARGET_AVX2 SIMD_INLINE __m256 vweight_avx2(const uint8_t *row, int64_t k, int bits, __m256 s, __m256 z,
						 __m256 table)
{
	(void)table;
	return (vcode_avx2(row, k, bits) - z) * s;
}

SIMD_INLINE float vtable_scalar(float s, float z)
{
	(void)z;
	return s;
}

SIMD_INLINE float vweight_scalar(const uint8_t *row, int64_t k, int bits, float s, float z, float table)
{
	(void)table;
	return (vcode_scalar(row, k, bits) - z) * s;
}

/* ---- the parts shared by every path ---- */

SIMD_INLINE float scale_of(const Q_Args *a, int64_t n, int64_t g)
{
	return simd_load1(a->scales, n * a->groups + g, a->sdt);
}

/* the zero point of group g of row n, as fp32 (int8: 0; int4 without zeros: 8) */
SIMD_INLINE float zero_of(const Q_Args *a, int64_t n, int64_t g, int bits)
{
	if (bits == 8)
		return 0.0f;
	return a->zeros ? (float)a->zeros[n * a->groups + g] : 8.0f;
}

/* w[n, k] for one k, the definition every path follows */
SIMD_INLINE float weight1(const Q_Args *a, int64_t n, int64_t k, int bits)
{
	int64_t g = k / a->group;
	return (vcode_scalar(a->W + n * a->row_bytes, k, bits) - zero_of(a, n, g, bits)) * scale_of(a, n, g);
}

/* + C in fp32, rounded once to out */
SIMD_INLINE void store_out(const Q_Args *a, int64_t m, int64_t n, float r)
{
	if (a->C)
		r += simd_load1(a->C, m * a->N + n, a->odt);
	simd_store1(a->out, m * a->N + n, r, a->odt);
}

/* tree16 after the tail k in [k16, K) went to lane k % 16 (w: the tail's weights, from the row
 * or a dequantized buffer) */
SIMD_INLINE float tail_and_sum(const Q_Args *a, float lanes[LANES], int64_t m, int64_t n, int64_t k16,
			       DataflowDatatype xdt, const float *wrow, int bits)
{
	for (int64_t k = k16; k < a->K; k++) {
		float w = wrow ? wrow[k] : weight1(a, n, k, bits);
		lanes[k % LANES] = fmaf(simd_load1(a->x, m * a->K + k, xdt), w, lanes[k % LANES]);
	}
	return tree16(lanes);
}

/* ---- one body per path ----
 * NV_isa vectors make the 16 lanes; MB_isa rows of x per prefill step keep the MB x TILE_N
 * accumulators in registers (AVX-512: 16 of 32 zmm; AVX2: 8 of 16 ymm). */
enum { MB_avx512 = 4, MB_avx2 = 1, MB_scalar = 1 };
/* weight rows per decode pass: their accumulators (x DECODE_MAX_ROWS x NV) in registers */
enum { DECODE_N_avx512 = 4, DECODE_N_avx2 = 2, DECODE_N_scalar = 1 };
#define NV(isa) (LANES / VL_##isa)

#define QMATMUL_PATH(isa)                                                                                  \
	/* decode: rows [m0, m0 + mb) of x against weight rows [n, n + nn), dequantized in registers     \
	 * (the rows' accumulators are independent: their FMA latencies overlap) */                      \
	SIMD_ISA_INLINE(isa) void decode_rows_##isa(const Q_Args *a, int64_t n, int nn, int64_t m0, int mb,     \
						    int bits, DataflowDatatype xdt)                             \
	{                                                                                                  \
		Vf_##isa acc[DECODE_N_##isa][DECODE_MAX_ROWS][NV(isa)];                                    \
		for (int c = 0; c < DECODE_N_##isa; c++)                                                   \
			for (int r = 0; r < DECODE_MAX_ROWS; r++)                                          \
				for (int j = 0; j < NV(isa); j++)                                          \
					acc[c][r][j] = vset1_##isa(0.0f);                                  \
		int64_t k16 = a->K / LANES * LANES;                                                        \
		for (int64_t k0 = 0; k0 < k16; k0 += a->group) {                                           \
			int64_t g = k0 / a->group, gend = k0 + a->group < k16 ? k0 + a->group : k16;       \
			Vf_##isa s[DECODE_N_##isa], z[DECODE_N_##isa], table[DECODE_N_##isa];              \
			for (int c = 0; c < nn; c++) {                                                     \
				s[c] = vset1_##isa(scale_of(a, n + c, g));                                 \
				z[c] = vset1_##isa(zero_of(a, n + c, g, bits));                            \
				table[c] = vtable_##isa(s[c], z[c]);                                       \
			}                                                                                  \
			for (int64_t k = k0; k < gend; k += LANES)                                         \
				for (int j = 0; j < NV(isa); j++) {                                        \
					int64_t kj = k + j * VL_##isa;                                     \
					for (int c = 0; c < nn; c++) {                                     \
						const uint8_t *row = a->W + (n + c) * a->row_bytes;        \
						Vf_##isa w = vweight_##isa(row, kj, bits, s[c], z[c], table[c]); \
						for (int r = 0; r < mb; r++)                               \
							acc[c][r][j] = vfma_##isa(vload_##isa(a->x, (m0 + r) * a->K + kj, \
											      xdt),        \
										  w, acc[c][r][j]);        \
					}                                                                  \
				}                                                                          \
		}                                                                                          \
		for (int c = 0; c < nn; c++)                                                               \
			for (int r = 0; r < mb; r++) {                                                     \
				if (k16 == a->K) {                                                         \
					store_out(a, m0 + r, n + c, hsum16_##isa(acc[c][r]));              \
					continue;                                                          \
				}                                                                          \
				float lanes[LANES];                                                        \
				for (int j = 0; j < NV(isa); j++)                                          \
					vstoref_##isa(lanes + j * VL_##isa, acc[c][r][j]);                 \
				store_out(a, m0 + r, n + c,                                                \
					  tail_and_sum(a, lanes, m0 + r, n + c, k16, xdt, NULL, bits));    \
			}                                                                                  \
	}                                                                                                  \
	/* prefill: rows [m0, m0 + mb) of x against the dequantized tile w[TILE_N][K] (rows n0..) */     \
	SIMD_ISA_INLINE(isa) void tile_rows_##isa(const Q_Args *a, const float *w, int64_t n0, int nt, int64_t m0, \
						  int mb, DataflowDatatype xdt)                                 \
	{                                                                                                  \
		Vf_##isa acc[MB_##isa][TILE_N][NV(isa)];                                                    \
		for (int r = 0; r < mb; r++)                                                               \
			for (int c = 0; c < TILE_N; c++)                                                   \
				for (int j = 0; j < NV(isa); j++)                                          \
					acc[r][c][j] = vset1_##isa(0.0f);                                  \
		int64_t K = a->K, k16 = K / LANES * LANES;                                                 \
		for (int64_t k = 0; k < k16; k += LANES)                                                   \
			for (int j = 0; j < NV(isa); j++) {                                                \
				int64_t kj = k + j * VL_##isa;                                             \
				Vf_##isa xv[MB_##isa];                                                     \
				for (int r = 0; r < mb; r++)                                               \
					xv[r] = vload_##isa(a->x, (m0 + r) * K + kj, xdt);                 \
				for (int c = 0; c < TILE_N; c++) {                                         \
					Vf_##isa wv = vloadf_##isa(w + c * K + kj);                        \
					for (int r = 0; r < mb; r++)                                       \
						acc[r][c][j] = vfma_##isa(xv[r], wv, acc[r][c][j]);        \
				}                                                                          \
			}                                                                                  \
		for (int r = 0; r < mb; r++)                                                               \
			for (int c = 0; c < nt; c++) {                                                     \
				if (k16 == K) {                                                            \
					store_out(a, m0 + r, n0 + c, hsum16_##isa(acc[r][c]));             \
					continue;                                                          \
				}                                                                          \
				float lanes[LANES];                                                        \
				for (int j = 0; j < NV(isa); j++)                                          \
					vstoref_##isa(lanes + j * VL_##isa, acc[r][c][j]);                 \
				float sum = tail_and_sum(a, lanes, m0 + r, n0 + c, k16, xdt, w + c * K, 8); \
				store_out(a, m0 + r, n0 + c, sum);                                         \
			}                                                                                  \
	}                                                                                                  \
	/* output channels [n0, n1) of every row: decode, or prefill through wbuf (TILE_N * K fp32) */  \
	SIMD_ISA_INLINE(isa) void qmatmul_body_##isa(const Q_Args *a, int64_t n0, int64_t n1, float *wbuf, int bits, \
						     DataflowDatatype xdt)                                      \
	{                                                                                                  \
		if (!wbuf) {                                                                               \
			for (int64_t n = n0; n < n1; n += DECODE_N_##isa) {                                \
				int nn = n1 - n < DECODE_N_##isa ? (int)(n1 - n) : DECODE_N_##isa;         \
				for (int64_t m = 0; m < a->M; m += DECODE_MAX_ROWS) {                      \
					int64_t left = a->M - m;                                           \
					if (left >= DECODE_MAX_ROWS && nn == DECODE_N_##isa)               \
						decode_rows_##isa(a, n, DECODE_N_##isa, m, DECODE_MAX_ROWS, bits, xdt); \
					else                                                               \
						decode_rows_##isa(a, n, nn, m, left < DECODE_MAX_ROWS ? (int)left \
							: DECODE_MAX_ROWS, bits, xdt);                     \
				}                                                                          \
			}                                                                                  \
			return;                                                                            \
		}                                                                                          \
		int64_t K = a->K, k16 = K / LANES * LANES;                                                 \
		for (int64_t t = n0; t < n1; t += TILE_N) {                                                \
			int nt = n1 - t < TILE_N ? (int)(n1 - t) : TILE_N;                                 \
			for (int c = 0; c < TILE_N; c++) { /* rows past nt: zeros, never stored */         \
				float *w = wbuf + c * K;                                                   \
				if (c >= nt) {                                                             \
					memset(w, 0, (size_t)K * sizeof(float));                           \
					continue;                                                          \
				}                                                                          \
				const uint8_t *row = a->W + (t + c) * a->row_bytes;                        \
				for (int64_t k0 = 0; k0 < k16; k0 += a->group) {                           \
					int64_t g = k0 / a->group;                                         \
					int64_t gend = k0 + a->group < k16 ? k0 + a->group : k16;          \
					Vf_##isa s = vset1_##isa(scale_of(a, t + c, g));                   \
					Vf_##isa z = vset1_##isa(zero_of(a, t + c, g, bits));              \
					Vf_##isa table = vtable_##isa(s, z);                               \
					for (int64_t k = k0; k < gend; k += VL_##isa)                      \
						vstoref_##isa(w + k, vweight_##isa(row, k, bits, s, z, table)); \
				}                                                                          \
				for (int64_t k = k16; k < K; k++)                                          \
					w[k] = weight1(a, t + c, k, bits);                                 \
			}                                                                                  \
			int64_t m = 0;                                                                     \
			for (; m + MB_##isa <= a->M; m += MB_##isa)                                        \
				tile_rows_##isa(a, wbuf, t, nt, m, MB_##isa, xdt);                         \
			for (; m < a->M; m++)                                                              \
				tile_rows_##isa(a, wbuf, t, nt, m, 1, xdt);                                \
		}                                                                                          \
	}
SIMD_EACH_ISA(QMATMUL_PATH)
QMATMUL_PATH(scalar)

/* the body for constant bits and x dtype on each path, and the dispatch over them */
#define QMATMUL_RUN(bits, xname, xdt)                                                                      \
	SIMD_TARGET_AVX512 static void run_##bits##_##xname##_avx512(const Q_Args *a, int64_t n0, int64_t n1, float *w) \
	{                                                                                                  \
		qmatmul_body_avx512(a, n0, n1, w, bits, xdt);                                              \
	}                                                                                                  \
	SIMD_TARGET_AVX2 static void run_##bits##_##xname##_avx2(const Q_Args *a, int64_t n0, int64_t n1, float *w) \
	{                                                                                                  \
		qmatmul_body_avx2(a, n0, n1, w, bits, xdt);                                                \
	}                                                                                                  \
	static void run_##bits##_##xname##_scalar(const Q_Args *a, int64_t n0, int64_t n1, float *w)       \
	{                                                                                                  \
		qmatmul_body_scalar(a, n0, n1, w, bits, xdt);                                              \
	}                                                                                                  \
	static void run_##bits##_##xname(const Q_Args *a, int64_t n0, int64_t n1, float *w)                \
	{                                                                                                  \
		SIMD_DISPATCH(run_##bits##_##xname, a, n0, n1, w);                                         \
	}
QMATMUL_RUN(8, fp32, DATAFLOW_FP32)
QMATMUL_RUN(8, bf16, DATAFLOW_BF16)
QMATMUL_RUN(4, fp32, DATAFLOW_FP32)
QMATMUL_RUN(4, bf16, DATAFLOW_BF16)

/* This part's output channels (multiples of TILE_N); the prefill path's buffer is the part's
 * own (if it cannot be had, the decode path gives the same bits). */
static void qmatmul_part(const Q_Args *a, int part, int num_parts, int bits, DataflowDatatype xdt)
{
	int64_t n0, n1;
	dataflow_part_range(a->N, part, num_parts, TILE_N, &n0, &n1);
	if (n0 == n1)
		return;
	float *wbuf = a->M > DECODE_MAX_ROWS ? malloc((size_t)(TILE_N * a->K) * sizeof(float)) : NULL;
	if (bits == 8)
		(xdt == DATAFLOW_BF16 ? run_8_bf16 : run_8_fp32)(a, n0, n1, wbuf);
	else
		(xdt == DATAFLOW_BF16 ? run_4_bf16 : run_4_fp32)(a, n0, n1, wbuf);
	free(wbuf);
}

static Q_Args int8_unpack(void **args, DataflowDatatype sdt, DataflowDatatype odt)
{
	Dataflow_Qmatmul_Int8_Args p = dataflow_qmatmul_int8_args(args);
	return (Q_Args){.M = p.M, .N = p.N, .K = p.K, .group = p.K, .groups = 1, .row_bytes = p.K, .x = p.x,
			.scales = p.scales, .C = p.C, .W = (const uint8_t *)p.W, .zeros = NULL, .out = p.out,
			.sdt = sdt, .odt = odt};
}

static Q_Args int4_unpack(void **args, DataflowDatatype sdt, DataflowDatatype odt)
{
	Dataflow_Qmatmul_Int4_Args p = dataflow_qmatmul_int4_args(args);
	return (Q_Args){.M = p.M, .N = p.N, .K = p.K, .group = p.group_size,
			.groups = (p.K + p.group_size - 1) / p.group_size, .row_bytes = (p.K + 1) / 2, .x = p.x,
			.scales = p.scales, .C = p.C, .W = p.W, .zeros = p.zeros, .out = p.out, .sdt = sdt, .odt = odt};
}

/* dataflow_host_qmatmul_int<bits>_<x>_<scale>_<out> for every dtype combination */
#define QMATMUL_ENTRY(bits, xname, sname, oname, X, S, O)                                                  \
	void dataflow_host_qmatmul_int##bits##_##xname##_##sname##_##oname(void **args, int part, int num_parts) \
	{                                                                                                  \
		Q_Args q = int##bits##_unpack(args, S, O);                                                 \
		qmatmul_part(&q, part, num_parts, bits, X);                                                \
	}
#define QMATMUL_ENTRIES_X(bits, sname, oname, S, O)                                                        \
	QMATMUL_ENTRY(bits, fp32, sname, oname, DATAFLOW_FP32, S, O)                                       \
	QMATMUL_ENTRY(bits, bf16, sname, oname, DATAFLOW_BF16, S, O)
#define QMATMUL_ENTRIES(bits)                                                                              \
	QMATMUL_ENTRIES_X(bits, fp32, fp32, DATAFLOW_FP32, DATAFLOW_FP32)                                  \
	QMATMUL_ENTRIES_X(bits, fp32, bf16, DATAFLOW_FP32, DATAFLOW_BF16)                                  \
	QMATMUL_ENTRIES_X(bits, bf16, fp32, DATAFLOW_BF16, DATAFLOW_FP32)                                  \
	QMATMUL_ENTRIES_X(bits, bf16, bf16, DATAFLOW_BF16, DATAFLOW_BF16)
QMATMUL_ENTRIES(8)
QMATMUL_ENTRIES(4)

/* parts: runs of TILE_N output channels, each at least PART_MIN_MACS multiply-adds */
static int qmatmul_parts(int64_t M, int64_t N, int64_t K)
{
	return dataflow_parts_at_most(dataflow_elementwise_parts(M * N * K, PART_MIN_MACS), (N + TILE_N - 1) / TILE_N);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_qmatmul_int8_launch, Dataflow_Qmatmul_Int8_Args, dataflow_qmatmul_int8_args,
		     qmatmul_parts(a.M, a.N, a.K))
DATAFLOW_HOST_LAUNCH(dataflow_host_qmatmul_int4_launch, Dataflow_Qmatmul_Int4_Args, dataflow_qmatmul_int4_args,
		     qmatmul_parts(a.M, a.N, a.K))
