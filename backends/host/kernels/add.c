/* add: out = alpha * a + beta * b over n elements (axpby), fp32 arithmetic.
 * Two products and one sum, each rounded to fp32 (no fma: the build is ISO C, so the
 * compiler does not contract the scalar loop either), so every path gives the same bits.
 * fp16/bf16 are widened to fp32 in registers and the result rounded back to nearest even.
 * out may alias a or b: each element is read before it is written. Outputs of at least
 * STREAM_MIN_BYTES that do not partly overlap an input are written with streaming stores. */
#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"
#include "simd.h"
#include "stream_store.h"

/* parts are multiples of 64 elements (whole cache lines) and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

typedef Dataflow_Add_Args Add_Args;

typedef void (*Add_Range)(Add_Args x, int64_t i, int64_t end, int level);

static void add_part(void **args, int part, int num_parts, Add_Range range, int64_t size)
{
	int64_t i, end;
	Add_Args x = dataflow_add_args(args);
	dataflow_part_range(x.n, part, num_parts, PART_ALIGN, &i, &end);
	int level = simd_level();
	size_t bytes = (size_t)(x.n * size);
	int stream = x.n * size >= STREAM_MIN_BYTES && level != SIMD_SCALAR &&
		     (x.out == x.a || !stream_overlap(x.out, bytes, x.a, bytes)) &&
		     (x.out == x.b || !stream_overlap(x.out, bytes, x.b, bytes));
	if (!stream) {
		range(x, i, end, level);
		return;
	}
	_Alignas(64) char buf[STREAM_CHUNK_BYTES];
	for (int64_t c = i, chunk = STREAM_CHUNK_BYTES / size; c < end; c += chunk) {
		int64_t len = end - c < chunk ? end - c : chunk;
		Add_Args y = x;
		y.a = (const char *)x.a + c * size;
		y.b = (const char *)x.b + c * size;
		y.out = buf;
		range(y, 0, len, level);
		stream_copy((char *)x.out + c * size, buf, (size_t)(len * size), level);
	}
	stream_fence();
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

static void add_fp32_range(Add_Args x, int64_t i, int64_t end, int level)
{
	if (level == SIMD_AVX512)
		i = add_fp32_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_fp32_avx2(x, i, end);
	const float *a = x.a, *b = x.b;
	float *out = x.out;
	for (; i < end; i++)
		out[i] = x.alpha * a[i] + x.beta * b[i];
}

void dataflow_host_add_fp32(void **args, int part, int num_parts)
{
	add_part(args, part, num_parts, add_fp32_range, sizeof(float));
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

static void add_bf16_range(Add_Args x, int64_t i, int64_t end, int level)
{
	if (level == SIMD_AVX512)
		i = add_bf16_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_bf16_avx2(x, i, end);
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	for (; i < end; i++)
		out[i] = dataflow_fp32_to_bf16(x.alpha * dataflow_bf16_to_fp32(a[i]) + x.beta * dataflow_bf16_to_fp32(b[i]));
}

void dataflow_host_add_bf16(void **args, int part, int num_parts)
{
	add_part(args, part, num_parts, add_bf16_range, sizeof(uint16_t));
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

static void add_fp16_range(Add_Args x, int64_t i, int64_t end, int level)
{
	if (level == SIMD_AVX512)
		i = add_fp16_avx512(x, i, end);
	else if (level == SIMD_AVX2)
		i = add_fp16_avx2(x, i, end);
	const uint16_t *a = x.a, *b = x.b;
	uint16_t *out = x.out;
	for (; i < end; i++)
		out[i] = dataflow_fp32_to_fp16(x.alpha * dataflow_fp16_to_fp32(a[i]) + x.beta * dataflow_fp16_to_fp32(b[i]));
}

void dataflow_host_add_fp16(void **args, int part, int num_parts)
{
	add_part(args, part, num_parts, add_fp16_range, sizeof(uint16_t));
}

/* Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_add_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
					 Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	int64_t n = dataflow_add_args(op->op_args).n;
	if (n < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "add: n: expected >= 0, got %lld", (long long)n);
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_ADD_ARG_OUT]);
	config->num_parts = dataflow_elementwise_parts(n, PART_MIN_BYTES / size);
	return DATAFLOW_OK;
}
