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

/* sums[k] += dy * (x * rs) for VL columns each, k < n, down the unit's rows from column c */
#define PARTIALS_COLUMNS(isa)                                                                        \
	SIMD_ISA_INLINE(isa) void partials_vectors_##isa(const Partials_Args *a, const Unit *t, int64_t c, int n, \
							 DataflowDatatype dt)                                \
	{                                                                                            \
		Vf_##isa sums[4] = {0};                                                              \
		for (int64_t r = t->r0, o = c; r < t->r1; r++, o += a->hidden) {                     \
			Vf_##isa rs = vset1_##isa(a->rstd[r]);                                       \
			for (int k = 0; k < n; k++) {                                                \
				int64_t ok = o + k * VL_##isa;                                       \
				sums[k] = sums[k] + vload_##isa(t->dy, ok, dt) * (vload_##isa(t->x, ok, dt) * rs); \
			}                                                                            \
		}                                                                                    \
		for (int k = 0; k < n; k++)                                                          \
			vstoref_##isa(t->ws + c + k * VL_##isa, sums[k]);                            \
	}
SIMD_EACH_ISA(PARTIALS_COLUMNS)

/* columns in groups of 4 vectors (4 accumulators), then 1, then one at a time */
#define PARTIALS_VECTOR(isa)                                                                         \
	SIMD_ISA_INLINE(isa) void bwd_w_partials_##isa(const Partials_Args *a, int64_t u0, int64_t u1,     \
						       DataflowDatatype dt)                                  \
	{                                                                                            \
		for (int64_t u = u0; u < u1; u++) {                                                  \
			Unit t = unit_of(a, u, dt);                                                  \
			int64_t c = t.c0;                                                            \
			for (; c + 4 * VL_##isa <= t.c1; c += 4 * VL_##isa)                          \
				partials_vectors_##isa(a, &t, c, 4, dt);                             \
			for (; c + VL_##isa <= t.c1; c += VL_##isa)                                  \
				partials_vectors_##isa(a, &t, c, 1, dt);                             \
			partials_columns(a, &t, c, dt);                                              \
		}                                                                                    \
	}
SIMD_EACH_ISA(PARTIALS_VECTOR)

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

/* dw[c + k VL ...] = the sums down the blocks, VL columns each, k < n */
#define REDUCE_COLUMNS(isa)                                                                          \
	SIMD_ISA_INLINE(isa) void reduce_vectors_##isa(const Reduce_Args *a, int64_t c, int n, DataflowDatatype dt) \
	{                                                                                            \
		int64_t h = a->hidden, nb = num_blocks(a->rows);                                     \
		Vf_##isa sums[4] = {0};                                                              \
		for (int64_t b = 0, o = c; b < nb; b++, o += h)                                      \
			for (int k = 0; k < n; k++)                                                  \
				sums[k] = sums[k] + vloadf_##isa(a->workspace + o + k * VL_##isa);   \
		for (int k = 0; k < n; k++)                                                          \
			vstore_##isa(a->dw, c + k * VL_##isa, sums[k], dt);                          \
	}
SIMD_EACH_ISA(REDUCE_COLUMNS)

/* columns in groups of 4 vectors (4 accumulators), then 1, then one at a time */
#define REDUCE_VECTOR(isa)                                                                           \
	SIMD_ISA_INLINE(isa) void bwd_w_reduce_##isa(const Reduce_Args *a, int64_t c, int64_t c1, DataflowDatatype dt) \
	{                                                                                            \
		for (; c + 4 * VL_##isa <= c1; c += 4 * VL_##isa)                                    \
			reduce_vectors_##isa(a, c, 4, dt);                                           \
		for (; c + VL_##isa <= c1; c += VL_##isa)                                            \
			reduce_vectors_##isa(a, c, 1, dt);                                           \
		bwd_w_reduce_scalar(a, c, c1, dt);                                                   \
	}
SIMD_EACH_ISA(REDUCE_VECTOR)

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
