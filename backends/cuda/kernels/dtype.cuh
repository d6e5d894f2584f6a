// Format tags for kernels written once as templates: D::T is the storage type, D::load widens
// to fp32 exactly and D::store rounds (RNE) as convert.cuh does. A kernel's extern "C" entry
// points instantiate its template per catalogue variant (the storage types alone cannot tell
// fp16 from bf16). Vec<D> moves 16 bytes: 4 fp32 or 8 fp16/bf16 elements.
#pragma once

#include "convert.cuh"

#define DTYPE_TAG(NAME, TYPE)                                                                      \
	struct NAME {                                                                              \
		typedef TYPE T;                                                                    \
		static __device__ __forceinline__ float load(T x) { return load_##TYPE(x); }      \
		static __device__ __forceinline__ T store(float x) { return store_##TYPE(x); }    \
		static __device__ __forceinline__ float round(float x) { return load(store(x)); } \
	};
#define load_fp32_t load_fp32
#define store_fp32_t store_fp32
#define load_bf16_t load_bf16
#define store_bf16_t store_bf16
#define load_fp16_t load_fp16
#define store_fp16_t store_fp16
DTYPE_TAG(Fp32, fp32_t)
DTYPE_TAG(Bf16, bf16_t)
DTYPE_TAG(Fp16, fp16_t)

template <class D> struct Vec {
	enum { N = 16 / sizeof(typename D::T) };
	union {
		uint4 raw;
		typename D::T e[N];
	};
	// 16 bytes at p (16-byte aligned)
	__device__ __forceinline__ void load(const typename D::T *p) { raw = *(const uint4 *)p; }
	__device__ __forceinline__ void store(typename D::T *p) const { *(uint4 *)p = raw; }
	__device__ __forceinline__ float get(int k) const { return D::load(e[k]); }
	__device__ __forceinline__ void set(int k, float v) { e[k] = D::store(v); }
};

// true when every pointer is 16-byte aligned and n a multiple of the vector width: rows of n
// elements can then move as whole vectors
template <class D> __device__ __forceinline__ bool vec_ok(long long n, const void *a, const void *b = 0,
							    const void *c = 0, const void *d = 0)
{
	unsigned long long bits = (unsigned long long)a | (unsigned long long)b | (unsigned long long)c |
				  (unsigned long long)d;
	return (bits & 15) == 0 && n % Vec<D>::N == 0;
}
