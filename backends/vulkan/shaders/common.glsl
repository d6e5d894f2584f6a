// What every kernel includes: pointers as buffer references (arguments arrive as push
// constants in the skeleton's order, op_params.glsl), the element formats' conversions,
// bit for bit the host's (libdataflow/src/datatype_convert.c: round to nearest even,
// subnormals kept, overflow to Inf, or NaN for e4m3), in integer arithmetic so that the
// results do not depend on the device's float controls. A kernel is compiled once per
// variant with DT_<slot>=<dtype> defined for each dtype slot of its op.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer fp32_ref { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer fp16_ref { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer bf16_ref { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer fp8e4m3_ref { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer fp8e5m2_ref { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer int32_ref { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer int64_ref { int64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer fp64_ref { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer uint8_ref { uint8_t v[]; };
// int8 as raw bytes (no int8 arithmetic extension needed): the kernel sign-extends (INT8_OF)
layout(buffer_reference, std430, buffer_reference_align = 1) buffer int8_ref { uint8_t v[]; };
#define INT8_OF(b) (int(uint(b)) - (int(uint(b)) & 0x80) * 2)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer uint64_ref { uint64_t v[]; };

// REF(DT_x): the pointer type of a slot's dtype; LOAD/STORE convert an element to and from fp32.
#define REF_(d) d##_ref
#define REF(d) REF_(d)
#define LOAD_(d, x) load_##d(x)
#define LOAD(d, x) LOAD_(d, x)
#define STORE_(d, x) store_##d(x)
#define STORE(d, x) STORE_(d, x)

// Rounds the magnitude bits a of a non-NaN fp32 to a format with the given exponent bias and
// mantissa bits (RNE, subnormal results included); returns the exponent|mantissa code.
uint round_magnitude(uint a, uint bias, uint mbits)
{
	uint drop = 23 - mbits;
	if (a >= (128 - bias) << 23) {
		uint r = a - ((127 - bias) << 23);
		return (r + (1u << (drop - 1)) - 1 + ((r >> drop) & 1)) >> drop;
	}
	uint m24 = (a & 0x7fffffu) | 0x800000u;
	uint shift = min(151 - bias - mbits - (a >> 23), 25u);
	uint q = m24 >> shift;
	uint rem = m24 & ((1u << shift) - 1);
	return q + ((rem + (q & 1) > (1u << (shift - 1))) ? 1u : 0u);
}

// load_<dtype>(element) -> float and store_<dtype>(float) -> element; 16- and 8-bit elements
// are converted to 32 bits at the load and from them at the store (storage-only types).
float load_fp32(float x) { return x; }
float store_fp32(float x) { return x; }

float bf16_to_f32(uint x) { return uintBitsToFloat(x << 16); }
uint f32_to_bf16(float x)
{
	uint u = floatBitsToUint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return ((u >> 16) & 0x8000u) | 0x7fc0u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
#define load_bf16(x) bf16_to_f32(uint(x))
#define store_bf16(x) uint16_t(f32_to_bf16(x))

// A finite value of a small float format (exponent bias, mbits mantissa bits) from its fields:
// sign already at bit 31, biased exponent e, mantissa m (round_magnitude's inverse).
float finite_to_f32(uint sign, uint e, uint m, int bias, int mbits)
{
	if (e == 0u) { // subnormal: normalized in integers (float math could flush it)
		if (m == 0u)
			return uintBitsToFloat(sign);
		int shift = mbits - findMSB(m);
		return uintBitsToFloat(sign | (uint(128 - bias - shift) << 23) |
				       (((m << shift) & ((1u << mbits) - 1u)) << (23 - mbits)));
	}
	return uintBitsToFloat(sign | ((e + uint(127 - bias)) << 23) | (m << (23 - mbits)));
}

float fp16_to_f32(uint x)
{
	uint sign = (x & 0x8000u) << 16, e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
	if (e == 0x1fu)
		return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
	return finite_to_f32(sign, e, m, 15, 10);
}
uint f32_to_fp16(float x)
{
	uint u = floatBitsToUint(x), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
	if (a > 0x7f800000u) { // keep the top 10 payload bits, never turning the NaN into Inf
		uint payload = (a & 0x7fffffu) >> 13;
		return sign | 0x7c00u | (payload != 0u ? payload : 1u);
	}
	return sign | min(round_magnitude(a, 15, 10), 0x7c00u);
}
#define load_fp16(x) fp16_to_f32(uint(x))
#define store_fp16(x) uint16_t(f32_to_fp16(x))

float fp8e4m3_to_f32(uint x)
{
	uint sign = (x & 0x80u) << 24, e = (x >> 3) & 0xfu, m = x & 0x7u;
	if ((x & 0x7fu) == 0x7fu)
		return uintBitsToFloat(sign | 0x7fc00000u);
	return finite_to_f32(sign, e, m, 7, 3);
}
// Anything rounding past 448 lands on 0x7f, which is NaN; so do Inf and NaN.
uint f32_to_fp8e4m3(float x)
{
	uint u = floatBitsToUint(x);
	return ((u >> 24) & 0x80u) | min(round_magnitude(u & 0x7fffffffu, 7, 3), 0x7fu);
}
#define load_fp8e4m3(x) fp8e4m3_to_f32(uint(x))
#define store_fp8e4m3(x) uint8_t(f32_to_fp8e4m3(x))

// e5m2 is the top byte of fp16
float fp8e5m2_to_f32(uint x)
{
	if ((x & 0x7fu) > 0x7cu)
		return uintBitsToFloat(((x & 0x80u) << 24) | 0x7fc00000u);
	return fp16_to_f32(x << 8);
}
uint f32_to_fp8e5m2(float x)
{
	uint u = floatBitsToUint(x), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
	if (a > 0x7f800000u)
		return sign | 0x7eu;
	return sign | min(round_magnitude(a, 15, 2), 0x7cu);
}
#define load_fp8e5m2(x) fp8e5m2_to_f32(uint(x))
#define store_fp8e5m2(x) uint8_t(f32_to_fp8e5m2(x))

// Grid-stride loop over [0, n) for a 1-D dispatch: any workgroup count covers any n. Indices
// are 32-bit (GLSL indexes arrays with int/uint): launch functions refuse n >= 2^32.
#define FOR_EACH_INDEX(i, n)                                                                        \
	for (uint i = gl_GlobalInvocationID.x; i < uint(n); i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)

// A value rounded to dtype d and back (the host kernels' simd_round1).
#define ROUND(d, x) LOAD(d, STORE(d, x))

