/* rms_norm forward and bwd_x, row by row in fp32 (bwd_w, a reduction over rows, is in
 * rms_norm_bwd_w.c). Forward, as Hugging Face LlamaRMSNorm:
 *   rstd = 1 / sqrt(sum(x^2) / hidden + eps),   y = w * to_dtype(x * rstd)
 * the normalized row rounded to x's dtype before the weight multiply and the product rounded
 * again, as `weight * hidden_states.to(input_dtype)` does. Backward, with g = dy * w:
 *   dx = rstd * (g - x * (rstd^2 * (sum(g * x) / hidden)))
 * rounded once. Row sums run in 16 lanes (lane l takes the elements l mod 16 in order, the
 * lanes are added l + 8, l + 4, l + 2, l + 1, then the last hidden % 16 elements follow) with
 * no fma, so every path gives the same bits. y may alias x and dx may alias dy or x: a row is
 * read whole (for its sum) before any of it is written, and the second pass reads each
 * element before writing it. */
#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd_dtype.h"

/* parts are whole rows, at least 32 KiB of x each */
#define PART_MIN_BYTES 32768

/* ---- the 16 lanes of a row sum, added l + 8, l + 4, l + 2, l + 1 ---- */

SIMD_INLINE float lanes_sum(const float a[16])
{
	float s8[8], s4[4];
	for (int l = 0; l < 8; l++)
		s8[l] = a[l] + a[l + 8];
	for (int l = 0; l < 4; l++)
		s4[l] = s8[l] + s8[l + 4];
	return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* A vector body keeps the 16 lanes as 16 / VL vectors, acc[k] holding lanes [k VL, k VL + VL),
 * and hands them to lanes_sum. */
#define ROW_LANES(isa) (16 / VL_##isa)
#define ROW_LANES_SUM(isa)                                                                           \
	SIMD_ISA_INLINE(isa) float lanes_sum_##isa(const Vf_##isa acc[ROW_LANES(isa)])                    \
	{                                                                                            \
		float a[16];                                                                         \
		for (int k = 0; k < ROW_LANES(isa); k++)                                             \
			vstoref_##isa(a + k * VL_##isa, acc[k]);                                     \
		return lanes_sum(a);                                                                 \
	}
SIMD_EACH_ISA(ROW_LANES_SUM)

static inline int64_t row_offset(int64_t row, int64_t hidden, DataflowDatatype dt)
{
	return row * hidden * (dt == DATAFLOW_FP32 ? 4 : 2);
}

/* ---- forward ---- */

typedef Dataflow_Rms_Norm_Args Rms_Norm_Args;

/* Elements [j, h) of a row, scalar: the tail after the vector loops, or the whole row. */
SIMD_INLINE float sum_sq_from(const void *x, int64_t j, int64_t h, float sum, DataflowDatatype dt)
{
	for (; j < h; j++) {
		float v = simd_load1(x, j, dt);
		sum += v * v;
	}
	return sum;
}

SIMD_INLINE void normalize_from(const void *x, const void *w, void *y, int64_t j, int64_t h, float rstd,
				DataflowDatatype dt)
{
	for (; j < h; j++)
		simd_store1(y, j, simd_load1(w, j, dt) * simd_round1(simd_load1(x, j, dt) * rstd, dt), dt);
}

/* rstd of a row from its sum of squares; stored for the backward */
static inline float row_rstd(const Rms_Norm_Args *a, int64_t r, float sum_sq)
{
	float rstd = 1.0f / sqrtf(sum_sq / (float)a->hidden + a->eps);
	a->rstd[r] = rstd;
	return rstd;
}

#define RMS_NORM_VECTOR(isa)                                                                         \
	SIMD_ISA_INLINE(isa) void rms_norm_rows_##isa(const Rms_Norm_Args *a, int64_t r0, int64_t r1,      \
						      DataflowDatatype dt)                                   \
	{                                                                                            \
		int64_t h = a->hidden, h16 = h & ~(int64_t)15;                                       \
		for (int64_t r = r0; r < r1; r++) {                                                  \
			const char *x = (const char *)a->x + row_offset(r, h, dt);                   \
			char *y = (char *)a->y + row_offset(r, h, dt);                               \
			Vf_##isa acc[ROW_LANES(isa)] = {0};                                          \
			for (int64_t j = 0; j < h16; j += 16)                                        \
				for (int k = 0; k < ROW_LANES(isa); k++) {                           \
					Vf_##isa v = vload_##isa(x, j + k * VL_##isa, dt);           \
					acc[k] = acc[k] + v * v;                                     \
				}                                                                    \
			float rstd = row_rstd(a, r, sum_sq_from(x, h16, h, lanes_sum_##isa(acc), dt)); \
			Vf_##isa rs = vset1_##isa(rstd);                                             \
			int64_t j = 0;                                                               \
			for (; j + VL_##isa <= h; j += VL_##isa) {                                   \
				Vf_##isa q = vround_##isa(vload_##isa(x, j, dt) * rs, dt);           \
				vstore_##isa(y, j, vload_##isa(a->w, j, dt) * q, dt);                \
			}                                                                            \
			normalize_from(x, a->w, y, j, h, rstd, dt);                                  \
		}                                                                                    \
	}
SIMD_EACH_ISA(RMS_NORM_VECTOR)

SIMD_INLINE void rms_norm_rows_scalar(const Rms_Norm_Args *a, int64_t r0, int64_t r1, DataflowDatatype dt)
{
	int64_t h = a->hidden, h16 = h & ~(int64_t)15;
	for (int64_t r = r0; r < r1; r++) {
		const char *x = (const char *)a->x + row_offset(r, h, dt);
		char *y = (char *)a->y + row_offset(r, h, dt);
		float acc[16] = {0};
		for (int64_t j = 0; j < h16; j += 16)
			for (int l = 0; l < 16; l++) {
				float v = simd_load1(x, j + l, dt);
				acc[l] += v * v;
			}
		float rstd = row_rstd(a, r, sum_sq_from(x, h16, h, lanes_sum(acc), dt));
		normalize_from(x, a->w, y, 0, h, rstd, dt);
	}
}

/* ---- bwd_x ---- */

typedef Dataflow_Rms_Norm_Bwd_X_Args Rms_Norm_Bwd_X_Args;

SIMD_INLINE float sum_gx_from(const void *dy, const void *w, const void *x, int64_t j, int64_t h, float sum,
			      DataflowDatatype dt)
{
	for (; j < h; j++)
		sum += (simd_load1(dy, j, dt) * simd_load1(w, j, dt)) * simd_load1(x, j, dt);
	return sum;
}

SIMD_INLINE void dx_from(const void *dy, const void *w, const void *x, void *dx, int64_t j, int64_t h, float rstd,
			 float c, DataflowDatatype dt)
{
	for (; j < h; j++) {
		float g = simd_load1(dy, j, dt) * simd_load1(w, j, dt);
		simd_store1(dx, j, rstd * (g - simd_load1(x, j, dt) * c), dt);
	}
}

/* c = rstd^2 * mean(g * x) */
static inline float dx_scale(float rstd, float sum_gx, int64_t hidden)
{
	return (rstd * rstd) * (sum_gx / (float)hidden);
}

#define RMS_NORM_BWD_X_VECTOR(isa)                                                                   \
	SIMD_ISA_INLINE(isa) void rms_norm_bwd_x_rows_##isa(const Rms_Norm_Bwd_X_Args *a, int64_t r0,      \
							    int64_t r1, DataflowDatatype dt)                 \
	{                                                                                            \
		int64_t h = a->hidden, h16 = h & ~(int64_t)15;                                       \
		for (int64_t r = r0; r < r1; r++) {                                                  \
			const char *dy = (const char *)a->dy + row_offset(r, h, dt);                 \
			const char *x = (const char *)a->x + row_offset(r, h, dt);                   \
			char *dx = (char *)a->dx + row_offset(r, h, dt);                             \
			Vf_##isa acc[ROW_LANES(isa)] = {0};                                          \
			for (int64_t j = 0; j < h16; j += 16)                                        \
				for (int k = 0; k < ROW_LANES(isa); k++) {                           \
					int64_t jk = j + k * VL_##isa;                               \
					Vf_##isa g = vload_##isa(dy, jk, dt) * vload_##isa(a->w, jk, dt); \
					acc[k] = acc[k] + g * vload_##isa(x, jk, dt);                \
				}                                                                    \
			float rstd = a->rstd[r];                                                     \
			float c = dx_scale(rstd, sum_gx_from(dy, a->w, x, h16, h, lanes_sum_##isa(acc), dt), h); \
			Vf_##isa rs = vset1_##isa(rstd), cs = vset1_##isa(c);                        \
			int64_t j = 0;                                                               \
			for (; j + VL_##isa <= h; j += VL_##isa) {                                   \
				Vf_##isa g = vload_##isa(dy, j, dt) * vload_##isa(a->w, j, dt);      \
				vstore_##isa(dx, j, rs * (g - vload_##isa(x, j, dt) * cs), dt);      \
			}                                                                            \
			dx_from(dy, a->w, x, dx, j, h, rstd, c, dt);                                 \
		}                                                                                    \
	}
SIMD_EACH_ISA(RMS_NORM_BWD_X_VECTOR)

SIMD_INLINE void rms_norm_bwd_x_rows_scalar(const Rms_Norm_Bwd_X_Args *a, int64_t r0, int64_t r1,
					    DataflowDatatype dt)
{
	int64_t h = a->hidden, h16 = h & ~(int64_t)15;
	for (int64_t r = r0; r < r1; r++) {
		const char *dy = (const char *)a->dy + row_offset(r, h, dt), *x = (const char *)a->x + row_offset(r, h, dt);
		char *dx = (char *)a->dx + row_offset(r, h, dt);
		float acc[16] = {0};
		for (int64_t j = 0; j < h16; j += 16)
			for (int l = 0; l < 16; l++)
				acc[l] += (simd_load1(dy, j + l, dt) * simd_load1(a->w, j + l, dt)) *
					  simd_load1(x, j + l, dt);
		float rstd = a->rstd[r];
		float c = dx_scale(rstd, sum_gx_from(dy, a->w, x, h16, h, lanes_sum(acc), dt), h);
		dx_from(dy, a->w, x, dx, 0, h, rstd, c, dt);
	}
}

/* ---- entry points: whole rows per part ---- */

#define RMS_NORM_KERNELS(name, DT)                                                                        \
	SIMD_DTYPE_KERNEL(rms_norm_##name##_rows, rms_norm_rows, Rms_Norm_Args, DT)                       \
	SIMD_DTYPE_KERNEL(rms_norm_bwd_x_##name##_rows, rms_norm_bwd_x_rows, Rms_Norm_Bwd_X_Args, DT)     \
	SIMD_DTYPE_ENTRY(dataflow_host_rms_norm_##name, rms_norm_##name##_rows, Rms_Norm_Args,                    \
			 dataflow_rms_norm_args, a.rows, 1)                                               \
	SIMD_DTYPE_ENTRY(dataflow_host_rms_norm_bwd_x_##name, rms_norm_bwd_x_##name##_rows, Rms_Norm_Bwd_X_Args,  \
			 dataflow_rms_norm_bwd_x_args, a.rows, 1)

RMS_NORM_KERNELS(fp32, DATAFLOW_FP32)
RMS_NORM_KERNELS(fp16, DATAFLOW_FP16)
RMS_NORM_KERNELS(bf16, DATAFLOW_BF16)

/* Whole rows per part, at least PART_MIN_BYTES of x each. */
static int row_parts(const Op *op, int64_t rows, int64_t hidden, int x_arg)
{
	int64_t row_bytes = hidden * (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[x_arg]);
	return dataflow_elementwise_parts(rows, (PART_MIN_BYTES + row_bytes - 1) / row_bytes);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_rms_norm_launch, Rms_Norm_Args, dataflow_rms_norm_args,
		     row_parts(op, a.rows, a.hidden, DATAFLOW_RMS_NORM_ARG_X))
DATAFLOW_HOST_LAUNCH(dataflow_host_rms_norm_bwd_x_launch, Rms_Norm_Bwd_X_Args, dataflow_rms_norm_bwd_x_args,
		     row_parts(op, a.rows, a.hidden, DATAFLOW_RMS_NORM_BWD_X_ARG_X))
