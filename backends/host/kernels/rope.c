/* rope (HF Llama rotate_half): with a = pos[t] * inv_freq[i], c = cos(a), s = sin(a), d = head_dim/2
 *   out[i]     = x[i] * c - x[i + d] * s
 *   out[i + d] = x[i + d] * c + x[i] * s
 * rope_bwd is the inverse rotation, the same with s negated (negation is exact, so the
 * backward is the forward kernel on -s). Parts own token ranges; each token's cos/sin are
 * computed once (glibc sincosf, correctly reduced for any position) into a stack table
 * and reused for every head. Products and sums are rounded to fp32 separately (no fma;
 * ISO C does not contract), so every SIMD path and thread count gives the same bits.
 * out may equal x: each pair is read before it is written. */
#include <math.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "dataflow/ops.h"
#include "simd_dtype.h"

/* parts rotate at least 32 KiB */
#define PART_MIN_BYTES 32768

/* rope_bwd's arguments are rope's, with dy for x and dx for out */
typedef Dataflow_Rope_Args Rope_Args;

static Rope_Args rope_bwd_args(void **args)
{
	Dataflow_Rope_Bwd_Args b = dataflow_rope_bwd_args(args);
	return (Rope_Args){b.num_tokens, b.num_heads, b.head_dim, b.positions, b.inv_freq, b.dy, b.dx};
}

/* rotates the pairs [0, i) of a head in whole vectors; returns i, where the tail starts */
#define ROTATE_VECTOR(isa)                                                                           \
	SIMD_ISA_INLINE(isa) int64_t rotate_##isa(const void *x, void *out, int64_t base, int64_t d, const float *c, \
						  const float *s, DataflowDatatype dt)                       \
	{                                                                                            \
		int64_t i = 0;                                                                       \
		for (; i + VL_##isa <= d; i += VL_##isa) {                                           \
			Vf_##isa x1 = vload_##isa(x, base + i, dt), x2 = vload_##isa(x, base + d + i, dt); \
			Vf_##isa vc = vloadf_##isa(c + i), vs = vloadf_##isa(s + i);                 \
			vstore_##isa(out, base + i, x1 * vc - x2 * vs, dt);                          \
			vstore_##isa(out, base + d + i, x2 * vc + x1 * vs, dt);                      \
		}                                                                                    \
		return i;                                                                            \
	}
SIMD_EACH_ISA(ROTATE_VECTOR)

/* the scalar path: no whole vectors, everything is tail */
SIMD_INLINE int64_t rotate_scalar(const void *x, void *out, int64_t base, int64_t d, const float *c, const float *s,
				  DataflowDatatype dt)
{
	(void)x, (void)out, (void)base, (void)d, (void)c, (void)s, (void)dt;
	return 0;
}

SIMD_INLINE void rotate_tail(const void *x, void *out, int64_t base, int64_t d, int64_t i, const float *c,
			     const float *s, DataflowDatatype dt)
{
	for (; i < d; i++) {
		float x1 = simd_load1(x, base + i, dt), x2 = simd_load1(x, base + d + i, dt);
		simd_store1(out, base + i, x1 * c[i] - x2 * s[i], dt);
		simd_store1(out, base + d + i, x2 * c[i] + x1 * s[i], dt);
	}
}

#define ROPE_PATH(path)                                                                              \
	SIMD_TARGET_##path static void rope_rows_##path(Rope_Args a, int64_t t, int64_t end, float sign, DataflowDatatype dt) \
	{                                                                                                  \
		float c[DATAFLOW_ROPE_MAX_HEAD_DIM / 2], s[DATAFLOW_ROPE_MAX_HEAD_DIM / 2];                \
		int64_t d = a.head_dim / 2;                                                                \
		for (; t < end; t++) {                                                                     \
			float pos = (float)a.positions[t];                                                 \
			for (int64_t i = 0; i < d; i++) {                                                  \
				sincosf(pos * a.inv_freq[i], &s[i], &c[i]);                                \
				s[i] *= sign;                                                              \
			}                                                                                  \
			for (int64_t h = 0; h < a.num_heads; h++) {                                        \
				int64_t base = (t * a.num_heads + h) * a.head_dim;                         \
				rotate_tail(a.x, a.out, base, d, rotate_##path(a.x, a.out, base, d, c, s, dt), c, \
					    s, dt);                                                        \
			}                                                                                  \
		}                                                                                          \
	}

SIMD_EACH_ISA(ROPE_PATH)
ROPE_PATH(scalar)

SIMD_INLINE void rope(Rope_Args a, int part, int num_parts, float sign, DataflowDatatype dt)
{
	int64_t t, end;
	dataflow_part_range(a.num_tokens, part, num_parts, 1, &t, &end);
	SIMD_DISPATCH(rope_rows, a, t, end, sign, dt);
}

#define ROPE_VARIANT(dt, dt_enum)                                         \
	void dataflow_host_rope_##dt(void **args, int part, int num_parts)      \
	{                                                                        \
		rope(dataflow_rope_args(args), part, num_parts, 1.0f, dt_enum);  \
	}                                                                        \
	void dataflow_host_rope_bwd_##dt(void **args, int part, int num_parts) \
	{                                                                        \
		rope(rope_bwd_args(args), part, num_parts, -1.0f, dt_enum);      \
	}
ROPE_VARIANT(fp32, DATAFLOW_FP32)
ROPE_VARIANT(bf16, DATAFLOW_BF16)
ROPE_VARIANT(fp16, DATAFLOW_FP16)

/* Both ops (rope_bwd's arguments are laid out as rope's). The signature keeps head_dim even
 * and at most DATAFLOW_ROPE_MAX_HEAD_DIM (the kernels' stack tables). */
static int rope_parts(const Op *op, Rope_Args a)
{
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_ROPE_ARG_X]);
	return dataflow_parts_at_most(dataflow_elementwise_parts(a.num_tokens * a.num_heads * a.head_dim,
								 PART_MIN_BYTES / size),
				      a.num_tokens);
}

DATAFLOW_HOST_LAUNCH(dataflow_host_rope_launch, Rope_Args, dataflow_rope_args, rope_parts(op, a))
DATAFLOW_HOST_LAUNCH(dataflow_host_rope_bwd_launch, Rope_Args, dataflow_rope_args, rope_parts(op, a))
