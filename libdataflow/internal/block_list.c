#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_list.h"

/* Arrays sorted by offset: O(n) inserts, O(log n) lookups. Counts stay in the thousands,
 * so the moves are cheap next to the work the memory is used for. */

int block_list_reserve(Block_List *l, int need)
{
	if (need <= l->cap)
		return 1;
	int cap = l->cap ? l->cap * 2 : 64;
	while (cap < need)
		cap *= 2;
	Block *items = realloc(l->items, (size_t)cap * sizeof(Block));
	if (!items)
		return 0;
	l->items = items;
	l->cap = cap;
	return 1;
}

void block_list_free(Block_List *l)
{
	free(l->items);
	memset(l, 0, sizeof(*l));
}

void block_list_insert_at(Block_List *l, int i, Block b)
{
	memmove(l->items + i + 1, l->items + i, (size_t)(l->count - i) * sizeof(Block));
	l->items[i] = b;
	l->count++;
}

void block_list_remove_at(Block_List *l, int i)
{
	memmove(l->items + i, l->items + i + 1, (size_t)(l->count - i - 1) * sizeof(Block));
	l->count--;
}

int block_list_floor(const Block_List *l, uint64_t off)
{
	int lo = 0, hi = l->count - 1, ans = -1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (l->items[mid].offset <= off) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
}

int block_list_insert(Block_List *l, Block b)
{
	if (!block_list_reserve(l, l->count + 1))
		return 0;
	block_list_insert_at(l, block_list_floor(l, b.offset) + 1, b);
	return 1;
}

int block_list_contains(const Block_List *l, uint64_t off, uint64_t size, const void *ptr, char *why,
			size_t why_size)
{
	int i = block_list_floor(l, off);
	if (i < 0 || l->items[i].retired || off >= l->items[i].offset + l->items[i].requested) {
		snprintf(why, why_size, "pointer %p is not inside a live allocation (freed?)", ptr);
		return 0;
	}
	uint64_t end = l->items[i].offset + l->items[i].requested;
	if (size > end - off) {
		snprintf(why, why_size, "range of %llu bytes at %p runs %llu bytes past the end of its allocation",
			 (unsigned long long)size, ptr, (unsigned long long)(size - (end - off)));
		return 0;
	}
	return 1;
}

int block_list_carve(Block_List *l, uint64_t size, uint64_t *off, uint64_t *largest)
{
	int best = -1;
	*largest = 0;
	for (int i = 0; i < l->count; i++) {
		uint64_t s = l->items[i].size;
		if (s > *largest)
			*largest = s;
		if (s >= size && (best < 0 || s < l->items[best].size))
			best = i;
	}
	if (best < 0)
		return 0;
	*off = l->items[best].offset;
	l->items[best].offset += size;
	l->items[best].size -= size;
	if (l->items[best].size == 0)
		block_list_remove_at(l, best);
	return 1;
}

Block block_list_give_back(Block_List *l, Block blk)
{
	Block *f = l->items;
	int j = block_list_floor(l, blk.offset) + 1;
	if (j > 0 && f[j - 1].offset + f[j - 1].size == blk.offset) {
		j--;
		blk.offset = f[j].offset;
		blk.size += f[j].size;
		block_list_remove_at(l, j);
	}
	if (j < l->count && blk.offset + blk.size == f[j].offset) {
		blk.size += f[j].size;
		block_list_remove_at(l, j);
	}
	if (!block_list_reserve(l, l->count + 1))
		return (Block){0};
	block_list_insert_at(l, j, blk);
	return blk;
}
