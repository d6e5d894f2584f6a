#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* Device memory: blocks of VULKAN_BLOCK_BYTES carved into 256-byte aligned pieces (block
 * lists, best fit), an allocation of half a block or more in a block of its own. A pointer is
 * the piece's buffer device address. Shared blocks stay until the handle goes (allocating
 * device memory is slow); a block of its own goes with its allocation. The ledger has already
 * accounted the capacity. */

/* The block holding [address, address + size), or -1 (h->lock held). */
static int find_block(Vulkan_Handle *h, uint64_t address, uint64_t size)
{
	for (int i = 0; i < h->num_blocks; i++) {
		Vulkan_Block *b = &h->blocks[i];
		if (address >= b->address && address - b->address <= b->size && size <= b->size - (address - b->address))
			return i;
	}
	return -1;
}

int vulkan_find_buffer(Vulkan_Handle *h, uint64_t address, uint64_t size, VkBuffer *buffer, uint64_t *offset)
{
	pthread_mutex_lock(&h->lock);
	int i = find_block(h, address, size);
	if (i >= 0) {
		*buffer = h->blocks[i].buffer;
		*offset = address - h->blocks[i].address;
	}
	pthread_mutex_unlock(&h->lock);
	return i >= 0;
}

static Dataflow_Status add_block(Vulkan_Handle *h, uint64_t size, Vulkan_Block **out)
{
	Vulkan_Device *d = h->dev;
	if (h->num_blocks == h->cap_blocks) {
		int cap = h->cap_blocks ? 2 * h->cap_blocks : 16;
		Vulkan_Block *blocks = realloc(h->blocks, (size_t)cap * sizeof(*blocks));
		if (!blocks)
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan: no memory for the block table");
		h->blocks = blocks;
		h->cap_blocks = cap;
	}
	Vulkan_Block b = {.size = size};
	Dataflow_Status st = vulkan_buffer_create(d, size, d->device_local_type, &b.buffer, &b.memory);
	if (st != DATAFLOW_OK)
		return st;
	VkBufferDeviceAddressInfo info = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = b.buffer};
	b.address = h->vk->vkGetBufferDeviceAddress(d->device, &info);
	if (!block_list_insert(&b.free, (Block){.offset = 0, .size = size})) {
		vulkan_buffer_destroy(d, b.buffer, b.memory);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan: no memory for a block list");
	}
	h->blocks[h->num_blocks] = b;
	*out = &h->blocks[h->num_blocks++];
	return DATAFLOW_OK;
}

Dataflow_Status vulkan_mem_alloc(Dataflow_Handle *handle, uint64_t size, void **ptr)
{
	Vulkan_Handle *h = vulkan_of(handle);
	int own = size >= VULKAN_BLOCK_BYTES / 2;
	uint64_t off = 0, largest;
	Dataflow_Status st = DATAFLOW_OK;
	pthread_mutex_lock(&h->lock);
	Vulkan_Block *b = NULL;
	for (int i = 0; i < h->num_blocks && !own && !b; i++)
		if (h->blocks[i].size == VULKAN_BLOCK_BYTES && block_list_carve(&h->blocks[i].free, size, &off, &largest))
			b = &h->blocks[i];
	if (!b) {
		st = add_block(h, own ? size : VULKAN_BLOCK_BYTES, &b);
		if (st == DATAFLOW_OK)
			block_list_carve(&b->free, size, &off, &largest);
	}
	if (st == DATAFLOW_OK) {
		b->used += size;
		*ptr = (void *)(uintptr_t)(b->address + off);
	}
	pthread_mutex_unlock(&h->lock);
	return st;
}

void vulkan_mem_release(Dataflow_Handle *handle, void *ptr, uint64_t size)
{
	Vulkan_Handle *h = vulkan_of(handle);
	uint64_t address = (uint64_t)(uintptr_t)ptr;
	pthread_mutex_lock(&h->lock);
	int i = find_block(h, address, size);
	Vulkan_Block *b = &h->blocks[i]; /* the ledger hands back only what mem_alloc gave */
	b->used -= size;
	if (b->used == 0 && b->size != VULKAN_BLOCK_BYTES) {
		vulkan_buffer_destroy(h->dev, b->buffer, b->memory);
		block_list_free(&b->free);
		*b = h->blocks[--h->num_blocks];
	} else {
		block_list_give_back(&b->free, (Block){.offset = address - b->address, .size = size});
	}
	pthread_mutex_unlock(&h->lock);
}

void vulkan_memory_destroy(Vulkan_Handle *h)
{
	for (int i = 0; i < h->num_blocks; i++) {
		vulkan_buffer_destroy(h->dev, h->blocks[i].buffer, h->blocks[i].memory);
		block_list_free(&h->blocks[i].free);
	}
	free(h->blocks);
	h->blocks = NULL;
	h->num_blocks = h->cap_blocks = 0;
}

/* Two handles of one device share its memory: their ops and copies can use each other's. */
Dataflow_Status vulkan_enable_peer(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Vulkan_Device *a = vulkan_of(h)->dev, *b = vulkan_of(peer)->dev;
	if (a != b)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "enable_access_to_peer_mem: vulkan:%d cannot use vulkan:%d's memory (peer access "
					  "works between handles of the same Vulkan device)",
					  a->index, b->index);
	return DATAFLOW_OK;
}
