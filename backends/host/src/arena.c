#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host.h"

/* Device memory of the host backend: one region reserved up front (MAP_NORESERVE, so pages
 * cost nothing until touched) and carved into 256-byte aligned blocks, best fit, with free
 * blocks kept in a block list (block_list.c) and coalesced on release. This is the backend's
 * raw allocator: the ledger in libdataflow accounts the capacity, checks pointers and releases
 * a freed block only once the work queued before the free is done. */

/* Freed runs at least this large are handed back to the kernel so RSS follows usage. */
#define RELEASE_BYTES (64ull << 20)
#define HUGE_PAGE (2ull << 20)

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

Dataflow_Status arena_init(Arena *a, uint64_t capacity)
{
	memset(a, 0, sizeof(*a));
	a->capacity = capacity / HOST_ARENA_ALIGN * HOST_ARENA_ALIGN;
	/* Transparent huge pages where the kernel allows them (numpy and torch get them for
	 * large arrays too): a kernel gathering rows across a large table (embedding) or
	 * streaming hundreds of MiB takes a TLB miss per 4 KiB page otherwise. The region is
	 * 2 MiB aligned so that huge pages can back it from its first byte. */
	void *map = MAP_FAILED;
	if (a->capacity > 0 && a->capacity <= UINT64_MAX - HUGE_PAGE && a->capacity + HUGE_PAGE <= SIZE_MAX) {
		a->mapping_size = a->capacity + HUGE_PAGE;
		map = mmap(NULL, (size_t)a->mapping_size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (map == MAP_FAILED)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "host device memory: cannot reserve %llu bytes of address space (device_memory_bytes "
					  "%llu)",
					  (unsigned long long)a->capacity, (unsigned long long)capacity);
	a->mapping = map;
	a->base = (uint8_t *)round_up((uint64_t)(uintptr_t)map, HUGE_PAGE);
#ifdef MADV_HUGEPAGE
	(void)madvise(a->base, a->capacity, MADV_HUGEPAGE); /* a hint: fine if refused */
#endif
	if (!block_list_insert(&a->free, (Block){.offset = 0, .size = a->capacity})) {
		arena_destroy(a);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host device memory: no memory for block lists");
	}
	pthread_mutex_init(&a->lock, NULL);
	return DATAFLOW_OK;
}

void arena_destroy(Arena *a)
{
	if (a->mapping) {
		munmap(a->mapping, a->mapping_size);
		pthread_mutex_destroy(&a->lock);
	}
	block_list_free(&a->free);
	memset(a, 0, sizeof(*a));
}

Dataflow_Status arena_alloc(Arena *a, uint64_t size, void **ptr)
{
	uint64_t off, largest;
	pthread_mutex_lock(&a->lock);
	int ok = block_list_carve(&a->free, size, &off, &largest);
	pthread_mutex_unlock(&a->lock);
	if (!ok)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes: no free block that large in the "
					  "fragmented arena (largest free block %llu)",
					  (unsigned long long)size, (unsigned long long)largest);
	*ptr = a->base + off;
	return DATAFLOW_OK;
}

static void release_pages(Arena *a, uint64_t offset, uint64_t size)
{
	uint64_t page = 4096, lo = round_up(offset, page), hi = (offset + size) / page * page;
	if (hi > lo && hi - lo >= RELEASE_BYTES)
		madvise(a->base + lo, hi - lo, MADV_DONTNEED);
}

/* The block goes back into the free list, merged with its neighbours (block_list_give_back). */
void arena_release(Arena *a, void *ptr, uint64_t size)
{
	Block blk = {.offset = (uint64_t)((uint8_t *)ptr - a->base), .size = size};
	pthread_mutex_lock(&a->lock);
	blk = block_list_give_back(&a->free, blk);
	if (blk.size)
		release_pages(a, blk.offset, blk.size);
	pthread_mutex_unlock(&a->lock);
}
