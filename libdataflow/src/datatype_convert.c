/* Conversions between fp32 and the narrow float formats, bit-exact with ml_dtypes / numpy:
 *   bf16     1-8-7,  bias 127, Inf/NaN as IEEE
 *   fp16     1-5-10, bias 15,  Inf/NaN as IEEE
 *   fp8e4m3  1-4-3,  bias 7,   no Inf; S.1111.111 is NaN; max 448      (float8_e4m3fn)
 *   fp8e5m2  1-5-2,  bias 15,  Inf/NaN as IEEE; max 57344               (float8_e5m2)
 * Narrowing rounds to nearest, ties to even, with subnormal results where the format has
 * them. Overflow gives Inf (bf16, fp16, e5m2) or NaN (e4m3, keeping the sign). NaN keeps its
 * sign; its payload follows the reference library: bf16, e5m2 and e4m3 give the canonical
 * quiet NaN, fp16 keeps the top payload bits as numpy does (a signalling NaN stays
 * signalling). Widening is exact; fp16 and bf16 NaNs keep their payload, fp8 NaNs widen to
 * the canonical quiet NaN.
 *
 * All of it is integer bit arithmetic (or conversion instructions whose result does not
 * depend on MXCSR), so results do not change with the rounding mode or DAZ/FTZ, and the
 * AVX-512 / AVX2 paths are bit-identical to the scalar one. The AVX-512 BF16 instruction
 * vcvtneps2bf16 is not used: it flushes fp32 subnormal inputs to zero, where ml_dtypes
 * keeps them as bf16 subnormals. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "dataflow/datatype.h"
#include "simd.h"

static inline uint32_t bits_of(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	return u;
}

static inline float float_of(uint32_t u)
{
	float x;
	memcpy(&x, &u, sizeof(x));
	return x;
}

/* ---------------------------------------------------------------------------------------
 * scalar reference */

/* Rounds the magnitude bits a of a non-NaN fp32 (|x| as uint32) to a format with the given
 * exponent bias and mantissa bits; returns the exponent|mantissa code, which the caller
 * clamps for overflow. With drop = 23 - mbits:
 *   normal result:    code = (a - ((127-bias) << 23)) >> drop, rounded RNE (the re-biased
 *                     exponent sits right above the mantissa, so a carry out of the
 *                     mantissa bumps the exponent, as it must)
 *   subnormal result: code = m24 * 2^-shift rounded RNE, m24 the mantissa with its hidden
 *                     bit, shift = 151 - bias - mbits - exponent (capped at 25, where any
 *                     m24 < 2^24 rounds to 0; fp32 subnormals land there too)
 * RNE of q + rem/2^s: round up iff rem + (q & 1) > half. */
static inline uint32_t round_magnitude(uint32_t a, uint32_t bias, uint32_t mbits)
{
	const uint32_t drop = 23 - mbits;
	if (a >= (128 - bias) << 23) {
		uint32_t r = a - ((127 - bias) << 23);
		return (r + (1u << (drop - 1)) - 1 + ((r >> drop) & 1)) >> drop;
	}
	uint32_t m24 = (a & 0x7fffff) | 0x800000;
	uint32_t shift = 151 - bias - mbits - (a >> 23);
	if (shift > 25)
		shift = 25;
	uint32_t q = m24 >> shift;
	uint32_t rem = m24 & ((1u << shift) - 1);
	return q + (rem + (q & 1) > (1u << (shift - 1)));
}

/* bf16 is the top half of fp32: add 0x7fff plus the kept lsb and truncate (RNE). This
 * also covers fp32 subnormals (bf16 has the same exponent range) and overflow to Inf. */
uint16_t dataflow_fp32_to_bf16(float x)
{
	uint32_t u = bits_of(x);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float dataflow_bf16_to_fp32(uint16_t x)
{
	return float_of((uint32_t)x << 16);
}

uint16_t dataflow_fp32_to_fp16(float x)
{
	uint32_t u = bits_of(x);
	uint32_t a = u & 0x7fffffff;
	uint32_t sign = (u >> 16) & 0x8000;
	if (a > 0x7f800000) {
		/* numpy: keep the top 10 payload bits, but never let the NaN become Inf */
		uint32_t payload = (a & 0x7fffff) >> 13;
		return (uint16_t)(sign | 0x7c00 | (payload ? payload : 1));
	}
	uint32_t r = round_magnitude(a, 15, 10);
	return (uint16_t)(sign | (r < 0x7c00 ? r : 0x7c00));
}

/* normal: rebias the exponent (15 -> 127); subnormal: m * 2^-24, exact in fp32 */
float dataflow_fp16_to_fp32(uint16_t x)
{
	uint32_t sign = (uint32_t)(x & 0x8000) << 16;
	uint32_t e = (x >> 10) & 0x1f;
	uint32_t m = x & 0x3ff;
	if (e == 0x1f)
		return float_of(sign | 0x7f800000 | (m << 13));
	if (e == 0)
		return float_of(sign | bits_of((float)m * 0x1p-24f));
	return float_of(sign | ((e + 112) << 23) | (m << 13));
}

/* Anything rounding past 448 (code 0x7e) lands on 0x7f, which is NaN; so do Inf and NaN
 * (their re-biased magnitude is larger still). */
uint8_t dataflow_fp32_to_fp8e4m3(float x)
{
	uint32_t u = bits_of(x);
	uint32_t r = round_magnitude(u & 0x7fffffff, 7, 3);
	return (uint8_t)(((u >> 24) & 0x80) | (r < 0x7f ? r : 0x7f));
}

/* normal: rebias the exponent (7 -> 127); subnormal: m * 2^-9, exact in fp32 */
float dataflow_fp8e4m3_to_fp32(uint8_t x)
{
	uint32_t sign = (uint32_t)(x & 0x80) << 24;
	uint32_t e = (x >> 3) & 0xf;
	uint32_t m = x & 0x7;
	if ((x & 0x7f) == 0x7f)
		return float_of(sign | 0x7fc00000);
	if (e == 0)
		return float_of(sign | bits_of((float)m * 0x1p-9f));
	return float_of(sign | ((e + 120) << 23) | (m << 20));
}

uint8_t dataflow_fp32_to_fp8e5m2(float x)
{
	uint32_t u = bits_of(x);
	uint32_t a = u & 0x7fffffff;
	uint32_t sign = (u >> 24) & 0x80;
	if (a > 0x7f800000)
		return (uint8_t)(sign | 0x7e);
	uint32_t r = round_magnitude(a, 15, 2);
	return (uint8_t)(sign | (r < 0x7c ? r : 0x7c));
}

/* e5m2 is the top byte of fp16 */
float dataflow_fp8e5m2_to_fp32(uint8_t x)
{
	if ((x & 0x7f) > 0x7c)
		return float_of(((uint32_t)(x & 0x80) << 24) | 0x7fc00000);
	return dataflow_fp16_to_fp32((uint16_t)(x << 8));
}

/* ---------------------------------------------------------------------------------------
 * vector paths: the same integer arithmetic, 16 (AVX-512) or 8 (AVX2) lanes at a time. */

int dataflow_simd_level(void)
{
	static int cached = -1;
	int level = __atomic_load_n(&cached, __ATOMIC_RELAXED);
	if (level >= 0)
		return level;
	__builtin_cpu_init();
	level = SIMD_SCALAR;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
		level = SIMD_AVX2;
	if (level == SIMD_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl"))
		level = SIMD_AVX512;
	const char *cap = getenv("DATAFLOW_SIMD");
	if (cap && strcmp(cap, "scalar") == 0)
		level = SIMD_SCALAR;
	else if (cap && strcmp(cap, "avx2") == 0 && level > SIMD_AVX2)
		level = SIMD_AVX2;
	__atomic_store_n(&cached, level, __ATOMIC_RELAXED); /* racing first calls store the same value */
	return level;
}

/* ---- one body per ISA (simd.h): Vu_##isa lanes are uint32, compares give all-ones lanes ---- */

/* m ? yes : no per lane, m a compare's result (all ones or zero); yes or no may be a scalar */
#define USEL(m, yes, no) (((m) & (yes)) | (~(m) & (no)))

/* round_magnitude of the scalar reference, per lane. The subnormal shift is clamped to
 * [1, 25] (lanes outside it take the normal result, so the clamp changes no output and keeps
 * every vector shift count below 32). */
#define ROUND_MAGNITUDE(isa)                                                                         \
	SIMD_ISA_INLINE(isa) Vu_##isa round_magnitude_##isa(Vu_##isa a, uint32_t bias, uint32_t mbits)    \
	{                                                                                            \
		const uint32_t drop = 23 - mbits;                                                    \
		Vu_##isa r = a - ((127 - bias) << 23);                                               \
		Vu_##isa normal = (r + ((1u << (drop - 1)) - 1) + ((r >> drop) & 1)) >> drop;        \
		Vu_##isa m24 = (a & 0x7fffff) | 0x800000;                                            \
		Vu_##isa shift = (151 - bias - mbits) - (a >> 23);                                   \
		shift = USEL((Vu_##isa)(shift - 1 > 24), 25, shift);                                 \
		Vu_##isa one = (Vu_##isa){0} + 1;                                                    \
		Vu_##isa q = m24 >> shift;                                                           \
		Vu_##isa rem = m24 & ((one << shift) - 1);                                           \
		Vu_##isa sub = q - (Vu_##isa)(rem + (q & 1) > (one << (shift - 1)));                 \
		return USEL((Vu_##isa)(a >= ((128 - bias) << 23)), normal, sub);                     \
	}
SIMD_EACH_ISA(ROUND_MAGNITUDE)

/* A bulk function converts the largest multiple of VL_##isa elements and returns that count
 * (the scalar code does the rest); its step (the variadic argument) converts the VL_##isa
 * elements at i. */
#define BULK_LOOP(isa, name, Dst, Src, ...)                                                          \
	SIMD_TARGET_##isa static size_t name##_##isa(Dst *dst, const Src *src, size_t n)              \
	{                                                                                            \
		size_t i = 0;                                                                        \
		for (; i + VL_##isa <= n; i += VL_##isa) {                                           \
			__VA_ARGS__;                                                                 \
		}                                                                                    \
		return i;                                                                            \
	}
#define ENCODE_LOOP(isa, fmt, ...) BULK_LOOP(isa, encode_##fmt, void, float, __VA_ARGS__)
#define DECODE_LOOP(isa, fmt, ...) BULK_LOOP(isa, decode_##fmt, float, void, __VA_ARGS__)

/* bf16 and fp16 through simd.h's in-register conversions (fp16 NaN lanes rebuilt so a
 * signalling NaN stays signalling, as numpy) */
#define BULK_16BIT(isa, fmt)                                                                         \
	ENCODE_LOOP(isa, fmt, simd_store_##fmt##_##isa((uint16_t *)dst + i, vloadf_##isa(src + i)))   \
	DECODE_LOOP(isa, fmt, vstoref_##isa(dst + i, simd_load_##fmt##_##isa((const uint16_t *)src + i)))

/* An fp8 format with mbits mantissa bits and that exponent bias, widened: normal, the exponent
 * rebiased (bias -> 127); subnormal, m * sub_scale (2^(1 - bias - mbits)), exact in fp32; the
 * magnitude code inf is Inf (e4m3 has none: 0x80 matches no magnitude), codes above last are
 * NaN (the canonical quiet NaN). */
#define DECODE_FP8(isa, fmt, mbits, bias, sub_scale, inf, last)                                      \
	DECODE_LOOP(isa, fmt, Vu_##isa b = vload_u8_##isa((const uint8_t *)src + i);                  \
		    Vu_##isa mag = b & 0x7f;                                                         \
		    Vu_##isa normal = (mag << (23 - (mbits))) + ((127u - (bias)) << 23);             \
		    Vu_##isa m = b & ((1u << (mbits)) - 1);                                          \
		    Vu_##isa sub = (Vu_##isa)(__builtin_convertvector(m, Vf_##isa) * (sub_scale));     \
		    Vu_##isa r = USEL((Vu_##isa)(mag < (1u << (mbits))), sub, normal);               \
		    r = USEL((Vu_##isa)(mag == (inf)), 0x7f800000, r);                               \
		    r = USEL((Vu_##isa)(mag > (last)), 0x7fc00000, r) | ((b & 0x80) << 24);          \
		    vstoref_##isa(dst + i, (Vf_##isa)r))

#define BULK_CONVERSIONS(isa)                                                                        \
	BULK_16BIT(isa, bf16)                                                                        \
	BULK_16BIT(isa, fp16)                                                                        \
	/* past 448 rounds to 0x7f, NaN; so do Inf and NaN */                                        \
	ENCODE_LOOP(isa, fp8e4m3, Vu_##isa u = (Vu_##isa)vloadf_##isa(src + i);                       \
		    Vu_##isa r = round_magnitude_##isa(u & 0x7fffffff, 7, 3);                        \
		    r = USEL((Vu_##isa)(r > 0x7f), 0x7f, r) | ((u >> 24) & 0x80);                    \
		    vstore_u8_##isa((uint8_t *)dst + i, r))                                          \
	DECODE_FP8(isa, fp8e4m3, 3, 7, 0x1p-9f, 0x80, 0x7e)                                          \
	ENCODE_LOOP(isa, fp8e5m2, Vu_##isa u = (Vu_##isa)vloadf_##isa(src + i);                       \
		    Vu_##isa a = u & 0x7fffffff;                                                     \
		    Vu_##isa r = round_magnitude_##isa(a, 15, 2);                                    \
		    r = USEL((Vu_##isa)(r > 0x7c), 0x7c, r);                                         \
		    r = USEL((Vu_##isa)(a > 0x7f800000), 0x7e, r) | ((u >> 24) & 0x80);              \
		    vstore_u8_##isa((uint8_t *)dst + i, r))                                          \
	DECODE_FP8(isa, fp8e5m2, 2, 15, 0x1p-16f, 0x7c, 0x7c)
SIMD_EACH_ISA(BULK_CONVERSIONS)

/* ---------------------------------------------------------------------------------------
 * dispatch */

#define SCALAR_LOOPS(name, type)                                                       \
	static void encode_##name##_scalar(void *dst, const float *src, size_t n)      \
	{                                                                              \
		type *d = dst;                                                         \
		for (size_t i = 0; i < n; i++)                                         \
			d[i] = dataflow_fp32_to_##name(src[i]);                        \
	}                                                                              \
	static void decode_##name##_scalar(float *dst, const void *src, size_t n)      \
	{                                                                              \
		const type *s = src;                                                   \
		for (size_t i = 0; i < n; i++)                                         \
			dst[i] = dataflow_##name##_to_fp32(s[i]);                      \
	}
SCALAR_LOOPS(bf16, uint16_t)
SCALAR_LOOPS(fp16, uint16_t)
SCALAR_LOOPS(fp8e4m3, uint8_t)
SCALAR_LOOPS(fp8e5m2, uint8_t)

typedef size_t (*Encode_Bulk)(void *dst, const float *src, size_t n);
typedef size_t (*Decode_Bulk)(float *dst, const void *src, size_t n);

typedef struct {
	size_t size;
	Encode_Bulk encode_bulk[3]; /* by level; [SIMD_SCALAR] unused */
	Decode_Bulk decode_bulk[3];
	void (*encode_scalar)(void *dst, const float *src, size_t n);
	void (*decode_scalar)(float *dst, const void *src, size_t n);
} Narrow_Format;

#define NARROW_FORMAT(name, type)                                                              \
	{                                                                                      \
		sizeof(type), {NULL, encode_##name##_avx2, encode_##name##_avx512},            \
			{NULL, decode_##name##_avx2, decode_##name##_avx512}, encode_##name##_scalar, \
			decode_##name##_scalar                                                 \
	}

static const Narrow_Format format_bf16 = NARROW_FORMAT(bf16, uint16_t);
static const Narrow_Format format_fp16 = NARROW_FORMAT(fp16, uint16_t);
static const Narrow_Format format_fp8e4m3 = NARROW_FORMAT(fp8e4m3, uint8_t);
static const Narrow_Format format_fp8e5m2 = NARROW_FORMAT(fp8e5m2, uint8_t);

static const Narrow_Format *narrow_format(DataflowDatatype dtype)
{
	switch (dtype) {
	case DATAFLOW_BF16:
		return &format_bf16;
	case DATAFLOW_FP16:
		return &format_fp16;
	case DATAFLOW_FP8E4M3:
		return &format_fp8e4m3;
	case DATAFLOW_FP8E5M2:
		return &format_fp8e5m2;
	default:
		return NULL;
	}
}

static void encode(const Narrow_Format *f, void *dst, const float *src, size_t n)
{
	int level = dataflow_simd_level();
	size_t done = level > SIMD_SCALAR ? f->encode_bulk[level](dst, src, n) : 0;
	f->encode_scalar((char *)dst + done * f->size, src + done, n - done);
}

static void decode(const Narrow_Format *f, float *dst, const void *src, size_t n)
{
	int level = dataflow_simd_level();
	size_t done = level > SIMD_SCALAR ? f->decode_bulk[level](dst, src, n) : 0;
	f->decode_scalar(dst + done, (const char *)src + done * f->size, n - done);
}

static int is_float_dtype(DataflowDatatype dtype)
{
	return dtype == DATAFLOW_FP32 || narrow_format(dtype) != NULL;
}

static const char *name_or_unknown(DataflowDatatype dtype)
{
	const char *name = dataflow_datatype_name(dtype);
	return name ? name : "unknown";
}

/* Narrow -> narrow goes through fp32 in an L1-sized stack chunk; widening to fp32 is exact,
 * so the result is the single rounding of the source value. */
Dataflow_Status dataflow_convert(DataflowDatatype dst_dtype, void *dst, DataflowDatatype src_dtype,
				 const void *src, size_t n)
{
	if (!is_float_dtype(src_dtype))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "dataflow_convert: src_dtype: expected fp32, fp16, bf16, fp8e4m3 or fp8e5m2, got %s (%d)",
					  name_or_unknown(src_dtype), (int)src_dtype);
	if (!is_float_dtype(dst_dtype))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "dataflow_convert: dst_dtype: expected fp32, fp16, bf16, fp8e4m3 or fp8e5m2, got %s (%d)",
					  name_or_unknown(dst_dtype), (int)dst_dtype);
	if (n == 0)
		return DATAFLOW_OK;
	if (!src)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "dataflow_convert: src: expected a pointer to %zu elements, got NULL", n);
	if (!dst)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "dataflow_convert: dst: expected a pointer to %zu elements, got NULL", n);

	if (src_dtype == dst_dtype) {
		memmove(dst, src, n * dataflow_datatype_size(src_dtype));
		return DATAFLOW_OK;
	}
	const Narrow_Format *from = narrow_format(src_dtype);
	const Narrow_Format *to = narrow_format(dst_dtype);
	if (!from) {
		encode(to, dst, src, n);
	} else if (!to) {
		decode(from, dst, src, n);
	} else {
		float chunk[1024];
		for (size_t i = 0; i < n; i += 1024) {
			size_t m = n - i < 1024 ? n - i : 1024;
			decode(from, chunk, (const char *)src + i * from->size, m);
			encode(to, (char *)dst + i * to->size, chunk, m);
		}
	}
	return DATAFLOW_OK;
}
