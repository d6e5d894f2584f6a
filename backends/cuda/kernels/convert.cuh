// Conversions between fp32 and the narrow float formats, bit-for-bit the host's
// (libdataflow/src/datatype_convert.c: round to nearest even, subnormals kept, overflow to
// Inf, or NaN for e4m3, NaN payloads as ml_dtypes/numpy). Integer arithmetic only, so the
// results do not depend on FTZ or fast-math settings.
#pragma once

typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned int u32;

// Rounds the magnitude bits a of a non-NaN fp32 to a format with the given exponent bias
// and mantissa bits (RNE, subnormal results included); returns the exponent|mantissa code.
__device__ __forceinline__ u32 round_magnitude(u32 a, u32 bias, u32 mbits)
{
	const u32 drop = 23 - mbits;
	if (a >= (128 - bias) << 23) {
		u32 r = a - ((127 - bias) << 23);
		return (r + (1u << (drop - 1)) - 1 + ((r >> drop) & 1)) >> drop;
	}
	u32 m24 = (a & 0x7fffff) | 0x800000;
	u32 shift = 151 - bias - mbits - (a >> 23);
	if (shift > 25)
		shift = 25;
	u32 q = m24 >> shift;
	u32 rem = m24 & ((1u << shift) - 1);
	return q + (rem + (q & 1) > (1u << (shift - 1)));
}

__device__ __forceinline__ float load_fp32(float x) { return x; }
__device__ __forceinline__ float store_fp32(float x) { return x; }

__device__ __forceinline__ float load_bf16(u16 x) { return __uint_as_float((u32)x << 16); }
__device__ __forceinline__ u16 store_bf16(float x)
{
	u32 u = __float_as_uint(x);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (u16)(((u >> 16) & 0x8000) | 0x7fc0);
	return (u16)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

__device__ __forceinline__ float load_fp16(u16 x)
{
	u32 sign = (u32)(x & 0x8000) << 16, e = (x >> 10) & 0x1f, m = x & 0x3ff;
	if (e == 0x1f)
		return __uint_as_float(sign | 0x7f800000 | (m << 13));
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-24f));
	return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}
__device__ __forceinline__ u16 store_fp16(float x)
{
	u32 u = __float_as_uint(x), a = u & 0x7fffffff, sign = (u >> 16) & 0x8000;
	if (a > 0x7f800000) { // keep the top 10 payload bits, never turning the NaN into Inf
		u32 payload = (a & 0x7fffff) >> 13;
		return (u16)(sign | 0x7c00 | (payload ? payload : 1));
	}
	u32 r = round_magnitude(a, 15, 10);
	return (u16)(sign | (r < 0x7c00 ? r : 0x7c00));
}

__device__ __forceinline__ float load_fp8e4m3(u8 x)
{
	u32 sign = (u32)(x & 0x80) << 24, e = (x >> 3) & 0xf, m = x & 0x7;
	if ((x & 0x7f) == 0x7f)
		return __uint_as_float(sign | 0x7fc00000);
	if (e == 0)
		return __uint_as_float(sign | __float_as_uint((float)m * 0x1p-9f));
	return __uint_as_float(sign | ((e + 120) << 23) | (m << 20));
}
// Anything rounding past 448 lands on 0x7f, which is NaN; so do Inf and NaN.
__device__ __forceinline__ u8 store_fp8e4m3(float x)
{
	u32 u = __float_as_uint(x);
	u32 r = round_magnitude(u & 0x7fffffff, 7, 3);
	return (u8)(((u >> 24) & 0x80) | (r < 0x7f ? r : 0x7f));
}

// e5m2 is the top byte of fp16
__device__ __forceinline__ float load_fp8e5m2(u8 x)
{
	if ((x & 0x7f) > 0x7c)
		return __uint_as_float(((u32)(x & 0x80) << 24) | 0x7fc00000);
	return load_fp16((u16)(x << 8));
}
__device__ __forceinline__ u8 store_fp8e5m2(float x)
{
	u32 u = __float_as_uint(x), a = u & 0x7fffffff, sign = (u >> 24) & 0x80;
	if (a > 0x7f800000)
		return (u8)(sign | 0x7e);
	u32 r = round_magnitude(a, 15, 2);
	return (u8)(sign | (r < 0x7c ? r : 0x7c));
}

// Storage type of each format, for kernel signatures.
typedef float fp32_t;
typedef u16 fp16_t;
typedef u16 bf16_t;
typedef u8 fp8e4m3_t;
typedef u8 fp8e5m2_t;

// Grid-stride loop over [0, n): any grid covers any n.
#define FOR_EACH_INDEX(i, n)                                                                        \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                 \
	     i += (long long)gridDim.x * blockDim.x)
