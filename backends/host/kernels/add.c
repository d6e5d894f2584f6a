/* add: out = alpha * a + beta * b over n elements (axpby), fp32 arithmetic.
 * Two products and one sum, each rounded to fp32 (no fma: the build is ISO C, so the
 * compiler does not contract the scalar loop either), so every path gives the same bits.
 * fp16/bf16 are widened to fp32 in registers and the result rounded back to nearest even.
 * out may alias a or b: each element is read before it is written. */
#include "dataflow/host_kernel.h"
#include "simd.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

typedef struct {
	int64_t n;
	float alpha;
	const void *a;
	float beta;
	const void *b;
	void *out;
} Add_Args;

static Add_Args add_args(void **args, int part, int num_parts, int64_t *begin, int64_t *end)
{
	Add_Args x = {DATAFLOW_ARG(args, 0, int64_t), DATAFLOW_ARG(args, 1, float), DATAFLOW_ARG(args, 2, const void *),
		      DATAFLOW_ARG(args, 3, float),   DATAFLOW_ARG(args, 4, const void *), DATAFLOW_ARG(args, 5, void *)};
	dataflow_part_range(x.n, part, num_parts, PART_ALIGN, begin, end);
	return x;
}

/* ---- fp32 ---- */

SIMD_TARGET_AVX512 static int64_t add_fp32_avx512(Add_Args x, int64_t i, int64_t end)
{
	const float *a = x.a, *b = x.b;
	float *out = x.out;
	__m512 alpha = _mm512_set1_ps(x.alpha), beta = _mm512_set1_ps(x.beta);
	for (; i + 16 <= end; i += 16)
		_mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_mul_ps(alpha, _mm512_loadu_ps(a + i)),
							_mm512_mul_ps(beta, _mm512_loadu_ps(b + i))));
	return i;
}

SIMD_TARGET_AVX2 static int64_t add_fp32_avx2(Add_Args x, int64_t i, int64_t end)
{
	const float *a = x.a, *b = x.b;
	float *out = x.out;
	__m256 alpha = _mm256_set1_ps(x.alpha), beta = _mm256_set1_ps(x.beta);
	for (; i + 8 <= end; i += 8)
		_mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(alpha, _mm256_loadu_ps(a + i)),
							_mm256_mul_ps(beta, _mm256_loadu_ps(b + i))));
	return i;
}

void dataflow_host_add_fp32(void **args, int part, int num_parts)
{
	int64_t i, end;
	Add_Args x = add_args(args, part, num_parts, &i, &end);
	int level = simd_level();
	if (level == SIMD_AVX512)
		i = add_fp32_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_fp32_avx2(x, i, end);
	const float *a = x.a, *b = x.b;
	float *out = x.out;
	for (; i < end; i++)
		out[i] = x.alpha * a[i] + x.beta * b[i];
}

/* ---- bf16 ---- */

SIMD_TARGET_AVX512 static int64_t add_bf16_avx512(Add_Args x, int64_t i, int64_t end)
{
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	__m512 alpha = _mm512_set1_ps(x.alpha), beta = _mm512_set1_ps(x.beta);
	for (; i + 16 <= end; i += 16)
		simd_store_bf16_avx512(out + i, _mm512_add_ps(_mm512_mul_ps(alpha, simd_load_bf16_avx512(a + i)),
							      _mm512_mul_ps(beta, simd_load_bf16_avx512(b + i))));
	return i;
}

SIMD_TARGET_AVX2 static int64_t add_bf16_avx2(Add_Args x, int64_t i, int64_t end)
{
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	__m256 alpha = _mm256_set1_ps(x.alpha), beta = _mm256_set1_ps(x.beta);
	for (; i + 8 <= end; i += 8)
		simd_store_bf16_avx2(out + i, _mm256_add_ps(_mm256_mul_ps(alpha, simd_load_bf16_avx2(a + i)),
							    _mm256_mul_ps(beta, simd_load_bf16_avx2(b + i))));
	return i;
}

void dataflow_host_add_bf16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Add_Args x = add_args(args, part, num_parts, &i, &end);
	int level = simd_level();
	if (level == SIMD_AVX512)
		i = add_bf16_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_bf16_avx2(x, i, end);
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	for (; i < end; i++)
		out[i] = dataflow_fp32_to_bf16(x.alpha * dataflow_bf16_to_fp32(a[i]) + x.beta * dataflow_bf16_to_fp32(b[i]));
}

/* ---- fp16 ---- */

SIMD_TARGET_AVX512 static int64_t add_fp16_avx512(Add_Args x, int64_t i, int64_t end)
{
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	__m512 alpha = _mm512_set1_ps(x.alpha), beta = _mm512_set1_ps(x.beta);
	for (; i + 16 <= end; i += 16)
		simd_store_fp16_avx512(out + i, _mm512_add_ps(_mm512_mul_ps(alpha, simd_load_fp16_avx512(a + i)),
							      _mm512_mul_ps(beta, simd_load_fp16_avx512(b + i))));
	return i;
}

SIMD_TARGET_AVX2 static int64_t add_fp16_avx2(Add_Args x, int64_t i, int64_t end)
{
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	__m256 alpha = _mm256_set1_ps(x.alpha), beta = _mm256_set1_ps(x.beta);
	for (; i + 8 <= end; i += 8)
		simd_store_fp16_avx2(out + i, _mm256_add_ps(_mm256_mul_ps(alpha, simd_load_fp16_avx2(a + i)),
							    _mm256_mul_ps(beta, simd_load_fp16_avx2(b + i))));
	return i;
}

void dataflow_host_add_fp16(void **args, int part, int num_parts)
{
	int64_t i, end;
	Add_Args x = add_args(args, part, num_parts, &i, &end);
	int level = simd_level();
	if (level == SIMD_AVX512)
		i = add_fp16_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_fp16_avx2(x, i, end);
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	for (; i < end; i++)
		out[i] = dataflow_fp32_to_fp16(x.alpha * dataflow_fp16_to_fp32(a[i]) + x.beta * dataflow_fp16_to_fp32(b[i]));
}

/* Args: n, alpha, a, beta, b, out. Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_add_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
					 Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	int64_t n = *(const int64_t *)op->op_args[0];
	if (n < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "add: n: expected >= 0, got %lld", (long long)n);
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[5]);
	config->num_parts = dataflow_elementwise_parts(n, PART_MIN_BYTES / size);
	return DATAFLOW_OK;
}
