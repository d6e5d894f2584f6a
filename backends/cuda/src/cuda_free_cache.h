#ifndef DATAFLOW_CUDA_FREE_CACHE_H
#define DATAFLOW_CUDA_FREE_CACHE_H

#include <stdint.h>

/* Released device blocks kept for reuse by an allocation of the same size, because cuMemFree
 * may synchronize the whole device (and cuMemAlloc costs a driver call): the ring and the
 * model free and allocate the same sizes every step. The ledger has already accounted the
 * free; a kept block is memory the device still holds, given back (cuMemFree, cuda_memory.c)
 * when a new block would take the handle past its capacity, when cuMemAlloc finds no memory,
 * when the cache is full, and at close. Pure: tests/c/test_cuda_free_cache.c. */
#define CUDA_FREE_CACHE_SLOTS 256

typedef struct {
	uintptr_t ptr[CUDA_FREE_CACHE_SLOTS];
	uint64_t size[CUDA_FREE_CACHE_SLOTS];
	int count;
	uint64_t bytes; /* held in all */
} Cuda_Free_Cache;

/* A kept block of exactly size bytes, removed from the cache, or 0. */
uintptr_t cuda_free_cache_take(Cuda_Free_Cache *c, uint64_t size);
/* Keeps the block; 0 when full (the caller frees it). */
int cuda_free_cache_put(Cuda_Free_Cache *c, uintptr_t ptr, uint64_t size);
/* Removes and returns one block (its size into *size), or 0 when empty: for giving all back. */
uintptr_t cuda_free_cache_pop(Cuda_Free_Cache *c, uint64_t *size);

#endif
