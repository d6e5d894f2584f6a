#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host.h"

/* Device memory of the host backend: one region reserved up front (MAP_NORESERVE, so pages
 * cost nothing until touched) and carved into 256-byte aligned blocks. Live and free blocks
 * are kept as arrays sorted by offset: best-fit allocation, coalescing on free, and a
 * binary search tells whether any pointer lies inside a live allocation. Counts stay in the
 * thousands, so the O(n) inserts are cheap next to the work the memory is used for. */

/* Freed runs at least this large are handed back to the kernel so RSS follows usage. */
#define RELEASE_BYTES (64ull << 20)
#define HUGE_PAGE (2ull << 20)

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static int reserve(Arena_Block **arr, int *cap, int need)
{
	if (need <= *cap)
		return 1;
	int cap2 = *cap ? *cap * 2 : 64;
	while (cap2 < need)
		cap2 *= 2;
	Arena_Block *a = realloc(*arr, (size_t)cap2 * sizeof(Arena_Block));
	if (!a)
		return 0;
	*arr = a;
	*cap = cap2;
	return 1;
}

static void insert_at(Arena_Block *arr, int *n, int i, Arena_Block b)
{
	memmove(arr + i + 1, arr + i, (size_t)(*n - i) * sizeof(Arena_Block));
	arr[i] = b;
	(*n)++;
}

static void remove_at(Arena_Block *arr, int *n, int i)
{
	memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof(Arena_Block));
	(*n)--;
}

/* Index of the last block with offset <= off, or -1. */
static int floor_index(const Arena_Block *arr, int n, uint64_t off)
{
	int lo = 0, hi = n - 1, ans = -1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (arr[mid].offset <= off) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
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
	if (!reserve(&a->free, &a->cap_free, 1) || !reserve(&a->live, &a->cap_live, 1)) {
		arena_destroy(a);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host device memory: no memory for block lists");
	}
	a->free[0] = (Arena_Block){0, a->capacity, 0, 0};
	a->num_free = 1;
	pthread_mutex_init(&a->lock, NULL);
	return DATAFLOW_OK;
}

void arena_destroy(Arena *a)
{
	if (a->mapping)
		munmap(a->mapping, a->mapping_size);
	free(a->live);
	free(a->free);
	memset(a, 0, sizeof(*a));
}

Dataflow_Status arena_alloc(Arena *a, uint64_t size, void **ptr)
{
	uint64_t need = round_up(size, HOST_ARENA_ALIGN);
	pthread_mutex_lock(&a->lock);
	int best = -1;
	uint64_t largest = 0;
	for (int i = 0; i < a->num_free; i++) {
		uint64_t s = a->free[i].size;
		if (s > largest)
			largest = s;
		if (s >= need && (best < 0 || s < a->free[best].size))
			best = i;
	}
	if (best < 0 || !reserve(&a->live, &a->cap_live, a->num_live + 1)) {
		uint64_t in_use = a->in_use, cap = a->capacity;
		pthread_mutex_unlock(&a->lock);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes (%llu after 256-byte alignment): "
					  "capacity %llu, in use %llu, largest free block %llu",
					  (unsigned long long)size, (unsigned long long)need, (unsigned long long)cap,
					  (unsigned long long)in_use, (unsigned long long)largest);
	}
	Arena_Block blk = {a->free[best].offset, need, size, 0};
	a->free[best].offset += need;
	a->free[best].size -= need;
	if (a->free[best].size == 0)
		remove_at(a->free, &a->num_free, best);
	insert_at(a->live, &a->num_live, floor_index(a->live, a->num_live, blk.offset) + 1, blk);
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

/* Index of the live block starting at ptr, or -1 with the reason set as the error. */
static int find_live(Arena *a, void *ptr)
{
	const uint8_t *p = ptr;
	if (p < a->base || p >= a->base + a->capacity) {
		dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				   "free: pointer %p is not device memory of this handle (foreign pointer)", ptr);
		return -1;
	}
	uint64_t off = (uint64_t)(p - a->base);
	int i = floor_index(a->live, a->num_live, off);
	if (i >= 0 && a->live[i].offset == off && !a->live[i].retired)
		return i;
	int inside = i >= 0 && !a->live[i].retired && off < a->live[i].offset + a->live[i].size;
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
	/* room for the block in the free list later: release must not fail */
	int ok = i >= 0 && reserve(&a->free, &a->cap_free, a->num_free + a->num_live);
	if (ok)
		a->live[i].retired = 1;
	pthread_mutex_unlock(&a->lock);
	if (i >= 0 && !ok)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "free: no memory to grow the free list");
	return i >= 0 ? DATAFLOW_OK : DATAFLOW_ERR_INVALID_ARGUMENT;
}

void arena_release(Arena *a, void *ptr)
{
	uint64_t off = (uint64_t)((uint8_t *)ptr - a->base);
	pthread_mutex_lock(&a->lock);
	int i = floor_index(a->live, a->num_live, off);
	Arena_Block blk = a->live[i];
	remove_at(a->live, &a->num_live, i);
	a->in_use -= blk.size;
	/* insert into the free list, merging with the neighbours it touches */
	int j = floor_index(a->free, a->num_free, blk.offset) + 1;
	if (j > 0 && a->free[j - 1].offset + a->free[j - 1].size == blk.offset) {
		j--;
		blk.offset = a->free[j].offset;
		blk.size += a->free[j].size;
		remove_at(a->free, &a->num_free, j);
	}
	if (j < a->num_free && blk.offset + blk.size == a->free[j].offset) {
		blk.size += a->free[j].size;
		remove_at(a->free, &a->num_free, j);
	}
	insert_at(a->free, &a->num_free, j, blk);
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
	uint64_t off = (uint64_t)(p - a->base);
	pthread_mutex_lock(&a->lock);
	int i = floor_index(a->live, a->num_live, off);
	int live = i >= 0 && !a->live[i].retired && off < a->live[i].offset + a->live[i].requested;
	uint64_t end = live ? a->live[i].offset + a->live[i].requested : 0;
	pthread_mutex_unlock(&a->lock);
	if (!live) {
		snprintf(why, why_size, "pointer %p is not inside a live allocation (freed?)", ptr);
		return 0;
	}
	if (size > end - off) {
		snprintf(why, why_size, "range of %llu bytes at %p runs %llu bytes past the end of its allocation",
			 (unsigned long long)size, ptr, (unsigned long long)(size - (end - off)));
		return 0;
	}
	return 1;
}
