/* rms_norm_bwd_w, deterministic in two ops over an fp32 workspace [blocks, hidden]:
 *   partials: workspace[b, j] = sum over the rows r of block b, in order, of
 *             dy[r, j] * (x[r, j] * rstd[r])
 *   reduce:   dw[j] = sum over b, in order, of workspace[b, j], rounded once to dw's dtype
 * (blocks of DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows). Every workspace entry and every dw
 * entry is one fixed sequence of fp32 adds starting from 0 (columns are independent vector
 * lanes), so dw has the same bits for any split into parts, thread count or SIMD path. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"
#include "simd_dtype.h"

#define BLOCK_ROWS DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS
/* partials: a unit of work is one block of rows times CHUNK_COLS columns (at most 64 x 256) */
#define CHUNK_COLS 256
/* reduce: parts are multiples of 64 columns and at least REDUCE_MIN_ELEMENTS workspace entries */
#define REDUCE_ALIGN 64
#define REDUCE_MIN_ELEMENTS 16384

static inline int64_t num_blocks(int64_t rows)
{
	return (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
}

static inline int64_t num_chunks(int64_t hidden)
{
	return (hidden + CHUNK_COLS - 1) / CHUNK_COLS;
}

/* ---- partials ---- */

typedef Dataflow_Rms_Norm_Bwd_W_Partials_Args Partials_Args;

/* Unit u (chunk fastest): columns [c0, c1) of the block's rows [r0, r1), whose dy and x rows
 * start at dy and x (h elements apart) and whose sums go to ws[c0, c1). */
typedef struct {
	int64_t c0, c1, r0, r1;
	const void *dy, *x;
	float *ws;
} Unit;

static inline Unit unit_of(const Partials_Args *a, int64_t u, DataflowDatatype dt)
{
	int64_t h = a->hidden, b = u / num_chunks(h), c0 = (u % num_chunks(h)) * CHUNK_COLS, r0 = b * BLOCK_ROWS;
	int64_t skip = r0 * h * (dt == DATAFLOW_FP32 ? 4 : 2);
	Unit t = {c0, c0 + CHUNK_COLS < h ? c0 + CHUNK_COLS : h, r0, r0 + BLOCK_ROWS < a->rows ? r0 + BLOCK_ROWS : a->rows,
		  (const char *)a->dy + skip, (const char *)a->x + skip, a->workspace + b * h};
	return t;
}

/* columns [c, t.c1) one at a time, each down the rows */
SIMD_INLINE void partials_columns(const Partials_Args *a, const Unit *t, int64_t c, DataflowDatatype dt)
{
	for (; c < t->c1; c++) {
		float s = 0.0f;
		for (int64_t r = t->r0, o = c; r < t->r1; r++, o += a->hidden)
			s += simd_load1(t->dy, o, dt) * (simd_load1(t->x, o, dt) * a->rstd[r]);
		t->ws[c] = s;
	}
}

SIMD_INLINE void bwd_w_partials_scalar(const Partials_Args *a, int64_t u0, int64_t u1, DataflowDatatype dt)
{
	for (int64_t u = u0; u < u1; u++) {
		Unit t = unit_of(a, u, dt);
		partials_columns(a, &t, t.c0, dt);
	}
}

/* columns in groups of 64 (4 accumulators), then 16, then one at a time */
SIMD_TARGET_AVX512 SIMD_INLINE void bwd_w_partials_avx512(const Partials_Args *a, int64_t u0, int64_t u1,
							  DataflowDatatype dt)
{
	for (int64_t u = u0; u < u1; u++) {
		Unit t = unit_of(a, u, dt);
		int64_t c = t.c0;
#define TERM(k) _mm512_mul_ps(simd_load16_avx512(t.dy, o + 16 * (k), dt), \
			      _mm512_mul_ps(simd_load16_avx512(t.x, o + 16 * (k), dt), rs))
		for (; c + 64 <= t.c1; c += 64) {
			__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
			for (int64_t r = t.r0, o = c; r < t.r1; r++, o += a->hidden) {
				__m512 rs = _mm512_set1_ps(a->rstd[r]);
				s0 = _mm512_add_ps(s0, TERM(0));
				s1 = _mm512_add_ps(s1, TERM(1));
				s2 = _mm512_add_ps(s2, TERM(2));
				s3 = _mm512_add_ps(s3, TERM(3));
			}
			_mm512_storeu_ps(t.ws + c, s0);
			_mm512_storeu_ps(t.ws + c + 16, s1);
			_mm512_storeu_ps(t.ws + c + 32, s2);
			_mm512_storeu_ps(t.ws + c + 48, s3);
		}
		for (; c + 16 <= t.c1; c += 16) {
			__m512 s0 = _mm512_setzero_ps();
			for (int64_t r = t.r0, o = c; r < t.r1; r++, o += a->hidden) {
				__m512 rs = _mm512_set1_ps(a->rstd[r]);
				s0 = _mm512_add_ps(s0, TERM(0));
			}
			_mm512_storeu_ps(t.ws + c, s0);
		}
#undef TERM
		partials_columns(a, &t, c, dt);
	}
}

/* columns in groups of 32 (4 accumulators), then 8, then one at a time */
SIMD_TARGET_AVX2 SIMD_INLINE void bwd_w_partials_avx2(const Partials_Args *a, int64_t u0, int64_t u1,
						      DataflowDatatype dt)
{
	for (int64_t u = u0; u < u1; u++) {
		Unit t = unit_of(a, u, dt);
		int64_t c = t.c0;
#define TERM(k) _mm256_mul_ps(simd_load8_avx2(t.dy, o + 8 * (k), dt), \
			      _mm256_mul_ps(simd_load8_avx2(t.x, o + 8 * (k), dt), rs))
		for (; c + 32 <= t.c1; c += 32) {
			__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
			for (int64_t r = t.r0, o = c; r < t.r1; r++, o += a->hidden) {
				__m256 rs = _mm256_set1_ps(a->rstd[r]);
				s0 = _mm256_add_ps(s0, TERM(0));
				s1 = _mm256_add_ps(s1, TERM(1));
				s2 = _mm256_add_ps(s2, TERM(2));
				s3 = _mm256_add_ps(s3, TERM(3));
			}
			_mm256_storeu_ps(t.ws + c, s0);
			_mm256_storeu_ps(t.ws + c + 8, s1);
			_mm256_storeu_ps(t.ws + c + 16, s2);
			_mm256_storeu_ps(t.ws + c + 24, s3);
		}
		for (; c + 8 <= t.c1; c += 8) {
			__m256 s0 = _mm256_setzero_ps();
			for (int64_t r = t.r0, o = c; r < t.r1; r++, o += a->hidden) {
				__m256 rs = _mm256_set1_ps(a->rstd[r]);
				s0 = _mm256_add_ps(s0, TERM(0));
			}
			_mm256_storeu_ps(t.ws + c, s0);
		}
#undef TERM
		partials_columns(a, &t, c, dt);
	}
}

/* ---- reduce ---- */

typedef Dataflow_Rms_Norm_Bwd_W_Reduce_Args Reduce_Args;

/* columns [c0, c1) one at a time, each down the blocks */
SIMD_INLINE void bwd_w_reduce_scalar(const Reduce_Args *a, int64_t c0, int64_t c1, DataflowDatatype dt)
{
	int64_t h = a->hidden, nb = num_blocks(a->rows);
	for (int64_t c = c0; c < c1; c++) {
		float s = 0.0f;
		for (int64_t b = 0, o = c; b < nb; b++, o += h)
			s += a->workspace[o];
		simd_store1(a->dw, c, s, dt);
	}
}

/* columns in groups of 64 (4 accumulators), then 16, then one at a time */
SIMD_TARGET_AVX512 SIMD_INLINE void bwd_w_reduce_avx512(const Reduce_Args *a, int64_t c0, int64_t c1,
							DataflowDatatype dt)
{
	int64_t h = a->hidden, nb = num_blocks(a->rows), c = c0;
	const float *ws = a->workspace;
	for (; c + 64 <= c1; c += 64) {
		__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
		for (int64_t b = 0, o = c; b < nb; b++, o += h) {
			s0 = _mm512_add_ps(s0, _mm512_loadu_ps(ws + o));
			s1 = _mm512_add_ps(s1, _mm512_loadu_ps(ws + o + 16));
			s2 = _mm512_add_ps(s2, _mm512_loadu_ps(ws + o + 32));
			s3 = _mm512_add_ps(s3, _mm512_loadu_ps(ws + o + 48));
		}
		simd_store16_avx512(a->dw, c, s0, dt);
		simd_store16_avx512(a->dw, c + 16, s1, dt);
		simd_store16_avx512(a->dw, c + 32, s2, dt);
		simd_store16_avx512(a->dw, c + 48, s3, dt);
	}
	for (; c + 16 <= c1; c += 16) {
		__m512 s0 = _mm512_setzero_ps();
		for (int64_t b = 0, o = c; b < nb; b++, o += h)
			s0 = _mm512_add_ps(s0, _mm512_loadu_ps(ws + o));
		simd_store16_avx512(a->dw, c, s0, dt);
	}
	bwd_w_reduce_scalar(a, c, c1, dt);
}

/* columns in groups of 32 (4 accumulators), then 8, then one at a time */
SIMD_TARGET_AVX2 SIMD_INLINE void bwd_w_reduce_avx2(const Reduce_Args *a, int64_t c0, int64_t c1,
						    DataflowDatatype dt)
{
	int64_t h = a->hidden, nb = num_blocks(a->rows), c = c0;
	const float *ws = a->workspace;
	for (; c + 32 <= c1; c += 32) {
		__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
		for (int64_t b = 0, o = c; b < nb; b++, o += h) {
			s0 = _mm256_add_ps(s0, _mm256_loadu_ps(ws + o));
			s1 = _mm256_add_ps(s1, _mm256_loadu_ps(ws + o + 8));
			s2 = _mm256_add_ps(s2, _mm256_loadu_ps(ws + o + 16));
			s3 = _mm256_add_ps(s3, _mm256_loadu_ps(ws + o + 24));
		}
		simd_store8_avx2(a->dw, c, s0, dt);
		simd_store8_avx2(a->dw, c + 8, s1, dt);
		simd_store8_avx2(a->dw, c + 16, s2, dt);
		simd_store8_avx2(a->dw, c + 24, s3, dt);
	}
	for (; c + 8 <= c1; c += 8) {
		__m256 s0 = _mm256_setzero_ps();
		for (int64_t b = 0, o = c; b < nb; b++, o += h)
			s0 = _mm256_add_ps(s0, _mm256_loadu_ps(ws + o));
		simd_store8_avx2(a->dw, c, s0, dt);
	}
	bwd_w_reduce_scalar(a, c, c1, dt);
}

/* ---- entry points ---- */

/* partials take x's dtype, reduce dw's; partials' parts are ranges of units, reduce's of
 * columns */
#define BWD_W_KERNELS(name, DT)                                                                           \
	SIMD_DTYPE_KERNEL(bwd_w_partials_##name, bwd_w_partials, Partials_Args, DT)                       \
	SIMD_DTYPE_KERNEL(bwd_w_reduce_##name, bwd_w_reduce, Reduce_Args, DT)                             \
	SIMD_DTYPE_ENTRY(dataflow_host_rms_norm_bwd_w_partials_##name, bwd_w_partials_##name, Partials_Args,      \
			 dataflow_rms_norm_bwd_w_partials_args, num_blocks(a.rows) * num_chunks(a.hidden), 1)     \
	SIMD_DTYPE_ENTRY(dataflow_host_rms_norm_bwd_w_reduce_##name, bwd_w_reduce_##name, Reduce_Args,            \
			 dataflow_rms_norm_bwd_w_reduce_args, a.hidden, REDUCE_ALIGN)

BWD_W_KERNELS(fp32, DATAFLOW_FP32)
BWD_W_KERNELS(fp16, DATAFLOW_FP16)
BWD_W_KERNELS(bf16, DATAFLOW_BF16)

DATAFLOW_HOST_LAUNCH(dataflow_host_rms_norm_bwd_w_partials_launch, Partials_Args, dataflow_rms_norm_bwd_w_partials_args,
		     dataflow_elementwise_parts(num_blocks(a.rows) * num_chunks(a.hidden), 1))
/* parts are groups of REDUCE_ALIGN columns */
DATAFLOW_HOST_LAUNCH(dataflow_host_rms_norm_bwd_w_reduce_launch, Reduce_Args, dataflow_rms_norm_bwd_w_reduce_args,
		     dataflow_parts_at_most(dataflow_elementwise_parts(num_blocks(a.rows) * a.hidden, REDUCE_MIN_ELEMENTS),
					    (a.hidden + REDUCE_ALIGN - 1) / REDUCE_ALIGN))
