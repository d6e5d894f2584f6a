#ifndef DATAFLOW_BLOCK_LIST_H
#define DATAFLOW_BLOCK_LIST_H

/* Internal (the dataflow_internal static library, linked into the libraries that need it,
 * never exported): a list of [offset, offset + size) blocks sorted by offset, with a floor
 * search. The memory ledger keeps live allocations and host ranges in them (offset = address),
 * which pointer checks and free_mem consult; the host arena keeps its free blocks in one. */

#include <stddef.h>
#include <stdint.h>

#define BLOCK_LIST_PRIVATE __attribute__((visibility("hidden")))

typedef struct {
	uint64_t offset, size; /* size: the bytes the block occupies (after alignment) */
	uint64_t requested;    /* live blocks: the bytes asked for, the extent ranges are checked against */
	int retired;           /* live blocks: freed, waiting for queued work before reuse; not valid */
} Block;

typedef struct {
	Block *items;
	int count, cap;
} Block_List;

/* Grows the storage to hold `need` blocks; 0 when out of memory. */
BLOCK_LIST_PRIVATE int block_list_reserve(Block_List *list, int need);
BLOCK_LIST_PRIVATE void block_list_free(Block_List *list);
/* Inserts at index i (storage must be reserved) / removes index i, keeping the order. */
BLOCK_LIST_PRIVATE void block_list_insert_at(Block_List *list, int i, Block block);
BLOCK_LIST_PRIVATE void block_list_remove_at(Block_List *list, int i);
/* Index of the last block with offset <= off, or -1. */
BLOCK_LIST_PRIVATE int block_list_floor(const Block_List *list, uint64_t off);
/* Inserts in offset order, growing the storage; 0 when out of memory. */
BLOCK_LIST_PRIVATE int block_list_insert(Block_List *list, Block block);
/* 1 if [off, off + size) lies inside one block's requested extent; else 0 with a reason
 * naming ptr (the address the caller was given) in why. */
BLOCK_LIST_PRIVATE int block_list_contains(const Block_List *list, uint64_t off, uint64_t size, const void *ptr,
					   char *why, size_t why_size);

/* Free lists of an allocator (offset-sorted free blocks): takes `size` bytes from the smallest
 * free block that holds them into *off (1), or reports the largest free block in *largest (0). */
BLOCK_LIST_PRIVATE int block_list_carve(Block_List *free_list, uint64_t size, uint64_t *off, uint64_t *largest);
/* Gives [blk.offset, + blk.size) back, merged with the free neighbours it touches; returns the
 * merged free block (size 0 if the list could not grow: the bytes stay lost, the list intact). */
BLOCK_LIST_PRIVATE Block block_list_give_back(Block_List *free_list, Block blk);

#endif
