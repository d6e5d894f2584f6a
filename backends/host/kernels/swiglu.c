/* swiglu forward and backward, elementwise in fp32 with e = exp(-gate) (simd_math.h):
 *   forward:  out = to_dtype(to_dtype(gate / (1 + e)) * up)
 *             silu rounded to the dtype before the multiply, as F.silu(gate) * up in
 *             bf16/fp16 (Hugging Face LlamaMLP); gate / (1 + e) is torch's silu formula.
 *   backward: s = 1 / (1 + e),  d_up = d_out * (gate / (1 + e)),
 *             d_gate = ((d_out * up) * s) * (1 + gate * (1 - s)), each rounded once.
 * Each element's inputs are read before its outputs are written, so outputs may alias
 * inputs. Every path does the same fp32 operations, so gives the same bits. */
#include "dataflow/host_kernel.h"
#include "simd_math.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

/* ---- forward ---- */

typedef struct {
	const void *gate, *up;
	void *out;
} Swiglu_Args;

static SIMD_INLINE void swiglu_scalar(const Swiglu_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float g = scalar_load(a->gate, i, dt);
		float act = scalar_round(g / (1.0f + scalar_exp(0.0f - g)), dt);
		scalar_store(a->out, i, act * scalar_load(a->up, i, dt), dt);
	}
}

SIMD_TARGET_AVX512 static SIMD_INLINE void swiglu_avx512(const Swiglu_Args *a, int64_t i, int64_t end,
							 DataflowDatatype dt)
{
	for (; i + 16 <= end; i += 16) {
		__m512 g = simd_load16_avx512(a->gate, i, dt);
		__m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), simd_exp16_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g)));
		__m512 act = simd_round16_avx512(_mm512_div_ps(g, d), dt);
		simd_store16_avx512(a->out, i, _mm512_mul_ps(act, simd_load16_avx512(a->up, i, dt)), dt);
	}
	swiglu_scalar(a, i, end, dt); /* the tail */
}

SIMD_TARGET_AVX2 static SIMD_INLINE void swiglu_avx2(const Swiglu_Args *a, int64_t i, int64_t end,
						     DataflowDatatype dt)
{
	for (; i + 8 <= end; i += 8) {
		__m256 g = simd_load8_avx2(a->gate, i, dt);
		__m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), simd_exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g)));
		__m256 act = simd_round8_avx2(_mm256_div_ps(g, d), dt);
		simd_store8_avx2(a->out, i, _mm256_mul_ps(act, simd_load8_avx2(a->up, i, dt)), dt);
	}
	swiglu_scalar(a, i, end, dt); /* the tail */
}

SIMD_DTYPE_KERNEL(swiglu_fp32, swiglu, Swiglu_Args, DATAFLOW_FP32)
SIMD_DTYPE_KERNEL(swiglu_fp16, swiglu, Swiglu_Args, DATAFLOW_FP16)
SIMD_DTYPE_KERNEL(swiglu_bf16, swiglu, Swiglu_Args, DATAFLOW_BF16)

/* Args: rows, ffn, gate, up, out. */
static Swiglu_Args swiglu_args(void **args, int part, int num_parts, int64_t *begin, int64_t *end)
{
	int64_t n = DATAFLOW_ARG(args, 0, int64_t) * DATAFLOW_ARG(args, 1, int64_t);
	Swiglu_Args a = {DATAFLOW_ARG(args, 2, const void *), DATAFLOW_ARG(args, 3, const void *),
			 DATAFLOW_ARG(args, 4, void *)};
	dataflow_part_range(n, part, num_parts, PART_ALIGN, begin, end);
	return a;
}

void dataflow_host_swiglu_fp32(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Args a = swiglu_args(args, part, num_parts, &i, &end);
	swiglu_fp32(&a, i, end);
}

void dataflow_host_swiglu_fp16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Args a = swiglu_args(args, part, num_parts, &i, &end);
	swiglu_fp16(&a, i, end);
}

void dataflow_host_swiglu_bf16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Args a = swiglu_args(args, part, num_parts, &i, &end);
	swiglu_bf16(&a, i, end);
}

/* ---- backward ---- */

typedef struct {
	const void *d_out, *gate, *up;
	void *d_gate, *d_up;
} Swiglu_Bwd_Args;

static SIMD_INLINE void swiglu_bwd_scalar(const Swiglu_Bwd_Args *a, int64_t i, int64_t end, DataflowDatatype dt)
{
	for (; i < end; i++) {
		float dout = scalar_load(a->d_out, i, dt), g = scalar_load(a->gate, i, dt), u = scalar_load(a->up, i, dt);
		float d = 1.0f + scalar_exp(0.0f - g), s = 1.0f / d;
		float dg = ((dout * u) * s) * (1.0f + g * (1.0f - s)), du = dout * (g / d);
		scalar_store(a->d_gate, i, dg, dt);
		scalar_store(a->d_up, i, du, dt);
	}
}

SIMD_TARGET_AVX512 static SIMD_INLINE void swiglu_bwd_avx512(const Swiglu_Bwd_Args *a, int64_t i, int64_t end,
							     DataflowDatatype dt)
{
	__m512 one = _mm512_set1_ps(1.0f);
	for (; i + 16 <= end; i += 16) {
		__m512 dout = simd_load16_avx512(a->d_out, i, dt), g = simd_load16_avx512(a->gate, i, dt);
		__m512 u = simd_load16_avx512(a->up, i, dt);
		__m512 d = _mm512_add_ps(one, simd_exp16_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g)));
		__m512 s = _mm512_div_ps(one, d);
		__m512 dsilu = _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, s)));
		__m512 dg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dout, u), s), dsilu);
		__m512 du = _mm512_mul_ps(dout, _mm512_div_ps(g, d));
		simd_store16_avx512(a->d_gate, i, dg, dt);
		simd_store16_avx512(a->d_up, i, du, dt);
	}
	swiglu_bwd_scalar(a, i, end, dt); /* the tail */
}

SIMD_TARGET_AVX2 static SIMD_INLINE void swiglu_bwd_avx2(const Swiglu_Bwd_Args *a, int64_t i, int64_t end,
							 DataflowDatatype dt)
{
	__m256 one = _mm256_set1_ps(1.0f);
	for (; i + 8 <= end; i += 8) {
		__m256 dout = simd_load8_avx2(a->d_out, i, dt), g = simd_load8_avx2(a->gate, i, dt);
		__m256 u = simd_load8_avx2(a->up, i, dt);
		__m256 d = _mm256_add_ps(one, simd_exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g)));
		__m256 s = _mm256_div_ps(one, d);
		__m256 dsilu = _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, s)));
		__m256 dg = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dout, u), s), dsilu);
		__m256 du = _mm256_mul_ps(dout, _mm256_div_ps(g, d));
		simd_store8_avx2(a->d_gate, i, dg, dt);
		simd_store8_avx2(a->d_up, i, du, dt);
	}
	swiglu_bwd_scalar(a, i, end, dt); /* the tail */
}

SIMD_DTYPE_KERNEL(swiglu_bwd_fp32, swiglu_bwd, Swiglu_Bwd_Args, DATAFLOW_FP32)
SIMD_DTYPE_KERNEL(swiglu_bwd_fp16, swiglu_bwd, Swiglu_Bwd_Args, DATAFLOW_FP16)
SIMD_DTYPE_KERNEL(swiglu_bwd_bf16, swiglu_bwd, Swiglu_Bwd_Args, DATAFLOW_BF16)

/* Args: rows, ffn, d_out, gate, up, d_gate, d_up. */
static Swiglu_Bwd_Args swiglu_bwd_args(void **args, int part, int num_parts, int64_t *begin, int64_t *end)
{
	int64_t n = DATAFLOW_ARG(args, 0, int64_t) * DATAFLOW_ARG(args, 1, int64_t);
	Swiglu_Bwd_Args a = {DATAFLOW_ARG(args, 2, const void *), DATAFLOW_ARG(args, 3, const void *),
			     DATAFLOW_ARG(args, 4, const void *), DATAFLOW_ARG(args, 5, void *),
			     DATAFLOW_ARG(args, 6, void *)};
	dataflow_part_range(n, part, num_parts, PART_ALIGN, begin, end);
	return a;
}

void dataflow_host_swiglu_bwd_fp32(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Bwd_Args a = swiglu_bwd_args(args, part, num_parts, &i, &end);
	swiglu_bwd_fp32(&a, i, end);
}

void dataflow_host_swiglu_bwd_fp16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Bwd_Args a = swiglu_bwd_args(args, part, num_parts, &i, &end);
	swiglu_bwd_fp16(&a, i, end);
}

void dataflow_host_swiglu_bwd_bf16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Swiglu_Bwd_Args a = swiglu_bwd_args(args, part, num_parts, &i, &end);
	swiglu_bwd_bf16(&a, i, end);
}

/* ---- launch (both ops: args 0 and 1 are rows and ffn, arg 2 a tensor of the dtype) ---- */

static Dataflow_Status swiglu_launch_parts(const Op *op, Dataflow_Launch_Config *config)
{
	int64_t rows = *(const int64_t *)op->op_args[0], ffn = *(const int64_t *)op->op_args[1];
	if (rows <= 0 || ffn <= 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: rows and ffn must be > 0, got %lld and %lld", op->skeleton.nickname,
					  (long long)rows, (long long)ffn);
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[2]);
	config->num_parts = dataflow_elementwise_parts(rows * ffn, PART_MIN_BYTES / size);
	return DATAFLOW_OK;
}

/* Args: rows, ffn, gate, up, out. Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_swiglu_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
					    Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	return swiglu_launch_parts(op, config);
}

/* Args: rows, ffn, d_out, gate, up, d_gate, d_up. */
Dataflow_Status dataflow_host_swiglu_bwd_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
						Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	return swiglu_launch_parts(op, config);
}
