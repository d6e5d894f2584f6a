/* The CUDA backend's cache of released device blocks (backends/cuda/src/cuda_free_cache.c):
 * reuse by exact size, the byte count, a full cache, emptying it. No GPU, no driver. */
#include "cuda_free_cache.h"

#include "c_test.h"

int main(void)
{
	static Cuda_Free_Cache c;
	EXPECT_TRUE(cuda_free_cache_take(&c, 256) == 0);
	EXPECT_TRUE(cuda_free_cache_put(&c, 0x1000, 256) && cuda_free_cache_put(&c, 0x2000, 512) &&
		    cuda_free_cache_put(&c, 0x3000, 256));
	EXPECT_TRUE(c.count == 3 && c.bytes == 1024);
	EXPECT_TRUE(cuda_free_cache_take(&c, 768) == 0); /* no block of that size: no split, no merge */
	EXPECT_TRUE(cuda_free_cache_take(&c, 512) == 0x2000 && c.bytes == 512 && c.count == 2);
	uintptr_t a = cuda_free_cache_take(&c, 256), b = cuda_free_cache_take(&c, 256);
	EXPECT_TRUE(((a == 0x1000 && b == 0x3000) || (a == 0x3000 && b == 0x1000)) && c.count == 0 && c.bytes == 0);
	EXPECT_TRUE(cuda_free_cache_take(&c, 256) == 0);
	/* full: the caller frees the block itself */
	for (int i = 0; i < CUDA_FREE_CACHE_SLOTS; i++)
		EXPECT_TRUE(cuda_free_cache_put(&c, 0x10000 + (uintptr_t)i * 256, 256));
	EXPECT_TRUE(!cuda_free_cache_put(&c, 0x9000, 256) && c.count == CUDA_FREE_CACHE_SLOTS);
	EXPECT_TRUE(!cuda_free_cache_put(&c, 0, 256)); /* no block */
	/* emptied one by one, every block once */
	uint64_t size, total = 0;
	int n = 0;
	uintptr_t p;
	while ((p = cuda_free_cache_pop(&c, &size)) != 0) {
		EXPECT_TRUE(p >= 0x10000 && size == 256);
		total += size;
		n++;
	}
	EXPECT_TRUE(n == CUDA_FREE_CACHE_SLOTS && total == 256 * CUDA_FREE_CACHE_SLOTS && c.bytes == 0);
	return *c_test_failures() != 0;
}
