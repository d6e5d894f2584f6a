#ifndef DATAFLOW_HOST_KERNELS_STREAM_STORE_H
#define DATAFLOW_HOST_KERNELS_STREAM_STORE_H

/* Non-temporal ("streaming") stores for memory-bound kernels with large outputs. A normal
 * store first reads the destination line into the cache (read-for-ownership), so an
 * elementwise kernel writing an output much larger than the cache moves the output over
 * the memory bus twice; a streaming store writes whole lines without reading them. Kernels
 * compute a chunk into a small buffer that stays in L1 (STREAM_CHUNK_BYTES), then
 * stream_copy it to the destination: the values, and so the bits, are those of the normal
 * path. Outputs smaller than STREAM_MIN_BYTES keep normal stores: the next op likely finds
 * them in the cache. A part that streamed ends with stream_fence. */

#include "simd.h"

#define STREAM_MIN_BYTES (16ll << 20)
#define STREAM_CHUNK_BYTES 4096

/* dst[0:n) = src[0:n): the head up to a vector boundary of dst and the tail by memcpy, the
 * whole vectors between by streaming stores */
#define STREAM_COPY(isa)                                                                             \
	SIMD_TARGET_##isa static inline void stream_copy_##isa(char *dst, const char *src, size_t n)     \
	{                                                                                            \
		size_t head = (size_t)(-(uintptr_t)dst & (sizeof(Vf_##isa) - 1));                    \
		head = head < n ? head : n;                                                          \
		memcpy(dst, src, head);                                                              \
		dst += head, src += head, n -= head;                                                 \
		for (; n >= sizeof(Vf_##isa); n -= sizeof(Vf_##isa), dst += sizeof(Vf_##isa), src += sizeof(Vf_##isa)) { \
			Vf_##isa x;                                                                  \
			memcpy(&x, src, sizeof(x));                                                  \
			vstream_##isa((float *)(void *)dst, x);                                      \
		}                                                                                    \
		memcpy(dst, src, n);                                                                 \
	}
SIMD_EACH_ISA(STREAM_COPY)

/* dst[0:n) = src[0:n) with streaming stores where the CPU has them */
static inline void stream_copy(void *dst, const void *src, size_t n, int level)
{
	if (level == SIMD_AVX512)
		stream_copy_avx512(dst, src, n);
	else if (level == SIMD_AVX2)
		stream_copy_avx2(dst, src, n);
	else
		memcpy(dst, src, n);
}

/* orders this thread's streaming stores before whatever it does next (e.g. reporting the
 * part done) */
static inline void stream_fence(void)
{
	_mm_sfence();
}

/* 1 when [a, a + a_bytes) and [b, b + b_bytes) share a byte */
static inline int stream_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return x < y + b_bytes && y < x + a_bytes;
}

#endif
