#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host.h"

/* Device memory of the host backend: one region reserved up front (MAP_NORESERVE, so pages
 * cost nothing until touched) and carved into 256-byte aligned blocks. Live and free blocks
 * are kept in block lists (block_list.c): best-fit allocation, coalescing on release, and a
 * floor search tells whether any pointer lies inside a live allocation. A freed block is first
 * retired (invalid for new work) and released once the work queued before the free is done
 * (memory.c). */

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
	a->capacity = round_up(capacity, HOST_ARENA_ALIGN);
	/* Transparent huge pages where the kernel allows them (numpy and torch get them for
	 * large arrays too): a kernel gathering rows across a large table (embedding) or
	 * streaming hundreds of MiB takes a TLB miss per 4 KiB page otherwise. The region is
	 * 2 MiB aligned so that huge pages can back it from its first byte. */
	a->mapping_size = a->capacity + HUGE_PAGE;
	void *map = mmap(NULL, a->mapping_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
	if (map == MAP_FAILED)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "host device memory: cannot reserve %llu bytes of address space",
					  (unsigned long long)a->capacity);
	a->mapping = map;
	a->base = (uint8_t *)round_up((uint64_t)(uintptr_t)map, HUGE_PAGE);
#ifdef MADV_HUGEPAGE
	(void)madvise(a->base, a->capacity, MADV_HUGEPAGE); /* a hint: fine if refused */
#endif
	if (!block_list_insert(&a->free, (Block){.offset = 0, .size = a->capacity}) || !block_list_reserve(&a->live, 1)) {
		arena_destroy(a);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host device memory: no memory for block lists");
	}
	pthread_mutex_init(&a->lock, NULL);
	return DATAFLOW_OK;
}

void arena_destroy(Arena *a)
{
	if (a->mapping)
		munmap(a->mapping, a->mapping_size);
	block_list_free(&a->live);
	block_list_free(&a->free);
	memset(a, 0, sizeof(*a));
}

Dataflow_Status arena_alloc(Arena *a, uint64_t size, void **ptr)
{
	uint64_t need = round_up(size, HOST_ARENA_ALIGN);
	pthread_mutex_lock(&a->lock);
	Block *free_blocks = a->free.items;
	int best = -1;
	uint64_t largest = 0;
	for (int i = 0; i < a->free.count; i++) {
		uint64_t s = free_blocks[i].size;
		if (s > largest)
			largest = s;
		if (s >= need && (best < 0 || s < free_blocks[best].size))
			best = i;
	}
	if (best < 0 || !block_list_reserve(&a->live, a->live.count + 1)) {
		uint64_t in_use = a->in_use, cap = a->capacity;
		pthread_mutex_unlock(&a->lock);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes (%llu after 256-byte alignment): "
					  "capacity %llu, in use %llu, largest free block %llu",
					  (unsigned long long)size, (unsigned long long)need, (unsigned long long)cap,
					  (unsigned long long)in_use, (unsigned long long)largest);
	}
	Block blk = {.offset = free_blocks[best].offset, .size = need, .requested = size};
	free_blocks[best].offset += need;
	free_blocks[best].size -= need;
	if (free_blocks[best].size == 0)
		block_list_remove_at(&a->free, best);
	block_list_insert_at(&a->live, block_list_floor(&a->live, blk.offset) + 1, blk);
	a->in_use += need;
	pthread_mutex_unlock(&a->lock);
	*ptr = a->base + blk.offset;
	return DATAFLOW_OK;
}

static void release_pages(Arena *a, uint64_t offset, uint64_t size)
{
	uint64_t page = 4096, lo = round_up(offset, page), hi = (offset + size) / page * page;
	if (hi > lo && hi - lo >= RELEASE_BYTES)
		madvise(a->base + lo, hi - lo, MADV_DONTNEED);
}

/* Index of the live, not yet freed block starting at ptr, or -1 with the error set. */
static int find_live(Arena *a, void *ptr)
{
	const uint8_t *p = ptr;
	if (p < a->base || p >= a->base + a->capacity) {
		dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				   "free: pointer %p is not device memory of this handle (foreign pointer)", ptr);
		return -1;
	}
	uint64_t off = (uint64_t)(p - a->base);
	int i = block_list_floor(&a->live, off);
	const Block *b = i >= 0 ? &a->live.items[i] : NULL;
	if (b && b->offset == off && !b->retired)
		return i;
	int inside = b && !b->retired && off < b->offset + b->size;
	dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
			   inside ? "free: pointer %p points inside an allocation, not at its start"
				  : "free: pointer %p is not a live allocation (already freed?)",
			   ptr);
	return -1;
}

Dataflow_Status arena_retire(Arena *a, void *ptr)
{
	pthread_mutex_lock(&a->lock);
	int i = find_live(a, ptr);
	/* room in the free list for every live block, so that a later release cannot fail */
	int ok = i >= 0 && block_list_reserve(&a->free, a->free.count + a->live.count);
	if (ok)
		a->live.items[i].retired = 1;
	pthread_mutex_unlock(&a->lock);
	if (i >= 0 && !ok)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "free: no memory to grow the free list");
	return i >= 0 ? DATAFLOW_OK : DATAFLOW_ERR_INVALID_ARGUMENT;
}

void arena_release(Arena *a, void *ptr)
{
	uint64_t off = (uint64_t)((uint8_t *)ptr - a->base);
	pthread_mutex_lock(&a->lock);
	int i = block_list_floor(&a->live, off);
	Block blk = a->live.items[i];
	block_list_remove_at(&a->live, i);
	a->in_use -= blk.size;
	/* insert into the free list, merging with the neighbours it touches */
	Block *f = a->free.items;
	int j = block_list_floor(&a->free, blk.offset) + 1;
	if (j > 0 && f[j - 1].offset + f[j - 1].size == blk.offset) {
		j--;
		blk.offset = f[j].offset;
		blk.size += f[j].size;
		block_list_remove_at(&a->free, j);
	}
	if (j < a->free.count && blk.offset + blk.size == f[j].offset) {
		blk.size += f[j].size;
		block_list_remove_at(&a->free, j);
	}
	blk.requested = 0;
	block_list_insert_at(&a->free, j, blk);
	release_pages(a, blk.offset, blk.size);
	pthread_mutex_unlock(&a->lock);
}

int arena_contains(Arena *a, const void *ptr, uint64_t size, char *why, size_t why_size)
{
	const uint8_t *p = ptr;
	if (p < a->base || p >= a->base + a->capacity) {
		snprintf(why, why_size, "pointer %p is not device memory of this handle", ptr);
		return 0;
	}
	pthread_mutex_lock(&a->lock);
	int ok = block_list_contains(&a->live, (uint64_t)(p - a->base), size, ptr, why, why_size);
	pthread_mutex_unlock(&a->lock);
	return ok;
}
