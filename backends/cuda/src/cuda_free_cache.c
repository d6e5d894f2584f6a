#include "cuda_free_cache.h"

/* (cuda_free_cache.h) */
uintptr_t cuda_free_cache_take(Cuda_Free_Cache *c, uint64_t size)
{
	for (int i = c->count; i-- > 0;) {
		if (c->size[i] != size)
			continue;
		uintptr_t ptr = c->ptr[i];
		c->count--;
		c->ptr[i] = c->ptr[c->count];
		c->size[i] = c->size[c->count];
		c->bytes -= size;
		return ptr;
	}
	return 0;
}

int cuda_free_cache_put(Cuda_Free_Cache *c, uintptr_t ptr, uint64_t size)
{
	if (c->count == CUDA_FREE_CACHE_SLOTS || !ptr)
		return 0;
	c->ptr[c->count] = ptr;
	c->size[c->count++] = size;
	c->bytes += size;
	return 1;
}

uintptr_t cuda_free_cache_pop(Cuda_Free_Cache *c, uint64_t *size)
{
	if (!c->count)
		return 0;
	c->count--;
	*size = c->size[c->count];
	c->bytes -= *size;
	return c->ptr[c->count];
}
