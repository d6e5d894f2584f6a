/* rms_norm_bwd_w, deterministic in two ops over an fp32 workspace [blocks, hidden]:
 *   partial: workspace[b, j] = sum over the rows r of block b, in order, of dy[r, j] * (x[r, j] * rstd[r])
 *   reduce:  dw[j] = sum over b, in order, of workspace[b, j], rounded once to dw's dtype
 * (blocks of DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows). Every workspace entry and every dw
 * entry is one fixed sequence of fp32 adds starting from 0, whatever the parts, the thread
 * count or the SIMD path (columns are independent lanes), so dw has the same bits on all. */
#include "dataflow/host_kernel.h"
#include "dataflow/ops.h"
#include "simd_dtype.h"

#define BLOCK_ROWS DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS
/* partial: a unit of work is one block of rows times CHUNK_COLS columns (at most 64 x 256) */
#define CHUNK_COLS 256
/* reduce: parts are multiples of 64 columns and at least REDUCE_MIN_ELEMENTS workspace entries */
#define REDUCE_ALIGN 64
#define REDUCE_MIN_ELEMENTS 16384

static inline int64_t num_blocks(int64_t rows)
{
	return (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
}

static inline int64_t elem_bytes(DataflowDatatype dt)
{
	return dt == DATAFLOW_FP32 ? 4 : 2;
}

/* ---- partial sums ---- */

typedef struct {
	int64_t rows, hidden;
	const void *dy, *x;
	const float *rstd;
	float *workspace;
} Bwd_W_Partial_Args;

/* Units [u0, u1) of (block, chunk) pairs, chunk fastest. In a unit, columns go in groups of
 * 64 (4 accumulators), then 16, then one at a time, each group down the block's rows. */
SIMD_TARGET_AVX512 SIMD_INLINE void bwd_w_partial_avx512(const Bwd_W_Partial_Args *a, int64_t u0, int64_t u1,
								DataflowDatatype dt)
{
	int64_t h = a->hidden, chunks = (h + CHUNK_COLS - 1) / CHUNK_COLS, es = elem_bytes(dt);
	for (int64_t u = u0; u < u1; u++) {
		int64_t b = u / chunks, c0 = (u % chunks) * CHUNK_COLS;
		int64_t c1 = c0 + CHUNK_COLS < h ? c0 + CHUNK_COLS : h;
		int64_t r0 = b * BLOCK_ROWS, r1 = r0 + BLOCK_ROWS < a->rows ? r0 + BLOCK_ROWS : a->rows;
		const char *dy = (const char *)a->dy + r0 * h * es, *x = (const char *)a->x + r0 * h * es;
		float *ws = a->workspace + b * h;
		int64_t c = c0;
		for (; c + 64 <= c1; c += 64) {
			__m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
			for (int64_t r = r0, o = 0; r < r1; r++, o += h) {
				__m512 rs = _mm512_set1_ps(a->rstd[r]);
#define TERM(k) _mm512_mul_ps(simd_load16_avx512(dy, o + c + 16 * (k), dt), \
			      _mm512_mul_ps(simd_load16_avx512(x, o + c + 16 * (k), dt), rs))
				s0 = _mm512_add_ps(s0, TERM(0));
				s1 = _mm512_add_ps(s1, TERM(1));
				s2 = _mm512_add_ps(s2, TERM(2));
				s3 = _mm512_add_ps(s3, TERM(3));
			}
			_mm512_storeu_ps(ws + c, s0);
			_mm512_storeu_ps(ws + c + 16, s1);
			_mm512_storeu_ps(ws + c + 32, s2);
			_mm512_storeu_ps(ws + c + 48, s3);
		}
		for (; c + 16 <= c1; c += 16) {
			__m512 s0 = _mm512_setzero_ps();
			for (int64_t r = r0, o = 0; r < r1; r++, o += h) {
				__m512 rs = _mm512_set1_ps(a->rstd[r]);
				s0 = _mm512_add_ps(s0, TERM(0));
			}
#undef TERM
			_mm512_storeu_ps(ws + c, s0);
		}
		for (; c < c1; c++) {
			float s = 0.0f;
			for (int64_t r = r0, o = 0; r < r1; r++, o += h)
				s += simd_load1(dy, o + c, dt) * (simd_load1(x, o + c, dt) * a->rstd[r]);
			ws[c] = s;
		}
	}
}

/* as above with columns in groups of 32 (4 accumulators), then 8, then one at a time */
SIMD_TARGET_AVX2 SIMD_INLINE void bwd_w_partial_avx2(const Bwd_W_Partial_Args *a, int64_t u0, int64_t u1,
							    DataflowDatatype dt)
{
	int64_t h = a->hidden, chunks = (h + CHUNK_COLS - 1) / CHUNK_COLS, es = elem_bytes(dt);
	for (int64_t u = u0; u < u1; u++) {
		int64_t b = u / chunks, c0 = (u % chunks) * CHUNK_COLS;
		int64_t c1 = c0 + CHUNK_COLS < h ? c0 + CHUNK_COLS : h;
		int64_t r0 = b * BLOCK_ROWS, r1 = r0 + BLOCK_ROWS < a->rows ? r0 + BLOCK_ROWS : a->rows;
		const char *dy = (const char *)a->dy + r0 * h * es, *x = (const char *)a->x + r0 * h * es;
		float *ws = a->workspace + b * h;
		int64_t c = c0;
		for (; c + 32 <= c1; c += 32) {
			__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
			for (int64_t r = r0, o = 0; r < r1; r++, o += h) {
				__m256 rs = _mm256_set1_ps(a->rstd[r]);
#define TERM(k) _mm256_mul_ps(simd_load8_avx2(dy, o + c + 8 * (k), dt), \
			      _mm256_mul_ps(simd_load8_avx2(x, o + c + 8 * (k), dt), rs))
				s0 = _mm256_add_ps(s0, TERM(0));
				s1 = _mm256_add_ps(s1, TERM(1));
				s2 = _mm256_add_ps(s2, TERM(2));
				s3 = _mm256_add_ps(s3, TERM(3));
			}
			_mm256_storeu_ps(ws + c, s0);
			_mm256_storeu_ps(ws + c + 8, s1);
			_mm256_storeu_ps(ws + c + 16, s2);
			_mm256_storeu_ps(ws + c + 24, s3);
		}
		for (; c + 8 <= c1; c += 8) {
			__m256 s0 = _mm256_setzero_ps();
			for (int64_t r = r0, o = 0; r < r1; r++, o += h) {
				__m256 rs = _mm256_set1_ps(a->rstd[r]);
				s0 = _mm256_add_ps(s0, TERM(0));
			}
#undef TERM
			_mm256_storeu_ps(ws + c, s0);
		}
		for (; c < c1; c++) {
			float s = 0.0f;
			for (int64_t r = r0, o = 0; r < r1; r++, o += h)
				s += simd_load1(dy, o + c, dt) * (simd_load1(x, o + c, dt) * a->rstd[r]);
			ws[c] = s;
		}
	}
}

/* rows outer, the chunk's running sums in the workspace row (in cache) */
SIMD_INLINE void bwd_w_partial_scalar(const Bwd_W_Partial_Args *a, int64_t u0, int64_t u1,
					     DataflowDatatype dt)
{
	int64_t h = a->hidden, chunks = (h + CHUNK_COLS - 1) / CHUNK_COLS, es = elem_bytes(dt);
	for (int64_t u = u0; u < u1; u++) {
		int64_t b = u / chunks, c0 = (u % chunks) * CHUNK_COLS;
		int64_t c1 = c0 + CHUNK_COLS < h ? c0 + CHUNK_COLS : h;
		int64_t r0 = b * BLOCK_ROWS, r1 = r0 + BLOCK_ROWS < a->rows ? r0 + BLOCK_ROWS : a->rows;
		const char *dy = (const char *)a->dy + r0 * h * es, *x = (const char *)a->x + r0 * h * es;
		float *ws = a->workspace + b * h;
		for (int64_t c = c0; c < c1; c++)
			ws[c] = 0.0f;
		for (int64_t r = r0, o = 0; r < r1; r++, o += h)
			for (int64_t c = c0; c < c1; c++)
				ws[c] += simd_load1(dy, o + c, dt) * (simd_load1(x, o + c, dt) * a->rstd[r]);
	}
}

SIMD_DTYPE_KERNEL(bwd_w_partial_fp32, bwd_w_partial, Bwd_W_Partial_Args, DATAFLOW_FP32)
SIMD_DTYPE_KERNEL(bwd_w_partial_fp16, bwd_w_partial, Bwd_W_Partial_Args, DATAFLOW_FP16)
SIMD_DTYPE_KERNEL(bwd_w_partial_bf16, bwd_w_partial, Bwd_W_Partial_Args, DATAFLOW_BF16)

static inline int64_t num_units(int64_t rows, int64_t hidden)
{
	return num_blocks(rows) * ((hidden + CHUNK_COLS - 1) / CHUNK_COLS);
}

/* Args: rows, hidden, dy, x, rstd, workspace. */
static Bwd_W_Partial_Args bwd_w_partial_args(void **args, int part, int num_parts, int64_t *u0, int64_t *u1)
{
	Bwd_W_Partial_Args a = {DATAFLOW_ARG(args, 0, int64_t),	     DATAFLOW_ARG(args, 1, int64_t),
				DATAFLOW_ARG(args, 2, const void *), DATAFLOW_ARG(args, 3, const void *),
				DATAFLOW_ARG(args, 4, const float *), DATAFLOW_ARG(args, 5, float *)};
	dataflow_part_range(num_units(a.rows, a.hidden), part, num_parts, 1, u0, u1);
	return a;
}

void dataflow_host_rms_norm_bwd_w_partials_fp32(void **args, int part, int num_parts)
{
	int64_t u0, u1;
	Bwd_W_Partial_Args a = bwd_w_partial_args(args, part, num_parts, &u0, &u1);
	bwd_w_partial_fp32(&a, u0, u1);
}

void dataflow_host_rms_norm_bwd_w_partials_fp16(void **args, int part, int num_parts)
{
	int64_t u0, u1;
	Bwd_W_Partial_Args a = bwd_w_partial_args(args, part, num_parts, &u0, &u1);
	bwd_w_partial_fp16(&a, u0, u1);
}

void dataflow_host_rms_norm_bwd_w_partials_bf16(void **args, int part, int num_parts)
{
	int64_t u0, u1;
	Bwd_W_Partial_Args a = bwd_w_partial_args(args, part, num_parts, &u0, &u1);
	bwd_w_partial_bf16(&a, u0, u1);
}

/* Args: rows, hidden, dy, x, rstd, workspace. Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_rms_norm_bwd_w_partials_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
						    Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	int64_t rows = *(const int64_t *)op->op_args[0], hidden = *(const int64_t *)op->op_args[1];
	if (rows <= 0 || hidden <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rms_norm_bwd_w: rows and hidden must be > 0, got %lld and %lld",
					  (long long)rows, (long long)hidden);
	config->num_parts = dataflow_elementwise_parts(num_units(rows, hidden), 1);
	return DATAFLOW_OK;
}

/* ---- reduce ---- */

typedef struct {
	int64_t rows, hidden;
	const float *workspace;
	void *dw;
} Bwd_W_Reduce_Args;

SIMD_INLINE void bwd_w_reduce_scalar(const Bwd_W_Reduce_Args *a, int64_t c0, int64_t c1,
					    DataflowDatatype dt)
{
	int64_t h = a->hidden, nb = num_blocks(a->rows);
	for (int64_t c = c0; c < c1; c++) {
		float s = 0.0f;
		for (int64_t b = 0, o = c; b < nb; b++, o += h)
			s += a->workspace[o];
		simd_store1(a->dw, c, s, dt);
	}
}

/* Columns [c0, c1), in groups of 64 (4 accumulators), then 16, then one at a time, each
 * summed down the blocks. */
SIMD_TARGET_AVX512 SIMD_INLINE void bwd_w_reduce_avx512(const Bwd_W_Reduce_Args *a, int64_t c0, int64_t c1,
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
	bwd_w_reduce_scalar(a, c, c1, dt); /* the last columns */
}

SIMD_TARGET_AVX2 SIMD_INLINE void bwd_w_reduce_avx2(const Bwd_W_Reduce_Args *a, int64_t c0, int64_t c1,
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
	bwd_w_reduce_scalar(a, c, c1, dt); /* the last columns */
}

SIMD_DTYPE_KERNEL(bwd_w_reduce_fp32, bwd_w_reduce, Bwd_W_Reduce_Args, DATAFLOW_FP32)
SIMD_DTYPE_KERNEL(bwd_w_reduce_fp16, bwd_w_reduce, Bwd_W_Reduce_Args, DATAFLOW_FP16)
SIMD_DTYPE_KERNEL(bwd_w_reduce_bf16, bwd_w_reduce, Bwd_W_Reduce_Args, DATAFLOW_BF16)

/* Args: rows, hidden, workspace, dw. */
static Bwd_W_Reduce_Args bwd_w_reduce_args(void **args, int part, int num_parts, int64_t *c0, int64_t *c1)
{
	Bwd_W_Reduce_Args a = {DATAFLOW_ARG(args, 0, int64_t), DATAFLOW_ARG(args, 1, int64_t),
			       DATAFLOW_ARG(args, 2, const float *), DATAFLOW_ARG(args, 3, void *)};
	dataflow_part_range(a.hidden, part, num_parts, REDUCE_ALIGN, c0, c1);
	return a;
}

void dataflow_host_rms_norm_bwd_w_reduce_fp32(void **args, int part, int num_parts)
{
	int64_t c0, c1;
	Bwd_W_Reduce_Args a = bwd_w_reduce_args(args, part, num_parts, &c0, &c1);
	bwd_w_reduce_fp32(&a, c0, c1);
}

void dataflow_host_rms_norm_bwd_w_reduce_fp16(void **args, int part, int num_parts)
{
	int64_t c0, c1;
	Bwd_W_Reduce_Args a = bwd_w_reduce_args(args, part, num_parts, &c0, &c1);
	bwd_w_reduce_fp16(&a, c0, c1);
}

void dataflow_host_rms_norm_bwd_w_reduce_bf16(void **args, int part, int num_parts)
{
	int64_t c0, c1;
	Bwd_W_Reduce_Args a = bwd_w_reduce_args(args, part, num_parts, &c0, &c1);
	bwd_w_reduce_bf16(&a, c0, c1);
}

/* Args: rows, hidden, workspace, dw. Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_rms_norm_bwd_w_reduce_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
							   Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	int64_t rows = *(const int64_t *)op->op_args[0], hidden = *(const int64_t *)op->op_args[1];
	if (rows <= 0 || hidden <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "rms_norm_bwd_w_reduce: rows and hidden must be > 0, got %lld and %lld",
					  (long long)rows, (long long)hidden);
	int64_t column_groups = (hidden + REDUCE_ALIGN - 1) / REDUCE_ALIGN;
	int parts = dataflow_elementwise_parts(num_blocks(rows) * hidden, REDUCE_MIN_ELEMENTS);
	config->num_parts = parts < column_groups ? parts : (int)column_groups;
	return DATAFLOW_OK;
}
