#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* Transfers and set_mem. Host memory reaches the device through host-visible staging
 * buffers, a chunk at a time: inbound = the worker copies the host bytes into staging, then
 * the transfer queue copies staging to the device; outbound the other way round. The host
 * copies run in stream order on the stream's worker, so the host buffer is read (written)
 * when the stream gets there, as cuMemcpyAsync does. */

#define CHUNK_BYTES (64ull << 20)

typedef struct {
	void *dst;
	const void *src;
	uint64_t size;
	Vulkan_Device *dev;
	VkBuffer staging; /* outbound: released after the copy */
	VkDeviceMemory staging_memory;
} Host_Copy;

static void host_copy(void *arg)
{
	Host_Copy *c = arg;
	memcpy(c->dst, c->src, c->size);
	if (c->staging)
		vulkan_buffer_destroy(c->dev, c->staging, c->staging_memory);
	free(c);
}

static Dataflow_Status staging_create(Vulkan_Device *d, uint64_t size, VkBuffer *buffer, VkDeviceMemory *memory,
				      void **mapped)
{
	Dataflow_Status st = vulkan_buffer_create(d, size, d->staging_type, buffer, memory);
	if (st == DATAFLOW_OK)
		st = vulkan_check(d->vk->vkMapMemory(d->device, *memory, 0, VK_WHOLE_SIZE, 0, mapped), d->index,
				  "vkMapMemory (staging)");
	if (st != DATAFLOW_OK)
		vulkan_buffer_destroy(d, *buffer, *memory);
	return st;
}

static Dataflow_Status lookup(Vulkan_Handle *owner, const void *ptr, uint64_t size, VkBuffer *buffer,
			      uint64_t *offset)
{
	if (vulkan_find_buffer(owner, (uint64_t)(uintptr_t)ptr, size, buffer, offset))
		return DATAFLOW_OK;
	/* the ledger let it through: device memory of this handle that is not ours would be a bug */
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "vulkan:%d: %p (%llu bytes) is not in its device memory",
				  owner->dev->index, ptr, (unsigned long long)size);
}

/* Records one copy (with a barrier making it visible to the host when to_host) and queues it;
 * the staging buffer (may be VK_NULL_HANDLE) is released once it is done, and stays the
 * caller's on failure. */
static Dataflow_Status copy(Vulkan_Stream *s, VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off,
			    uint64_t size, int to_host, VkBuffer staging, VkDeviceMemory staging_memory)
{
	const Vulkan_Functions *vk = s->handle->vk;
	Vulkan_Task t = {.transfer = 1, .staging = staging, .staging_memory = staging_memory};
	Dataflow_Status st = vulkan_stream_begin(s, 1, &t.cmd);
	if (st != DATAFLOW_OK)
		return st;
	VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off, .size = size};
	vk->vkCmdCopyBuffer(t.cmd, src, dst, 1, &region);
	if (to_host) {
		VkMemoryBarrier barrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
					   .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
					   .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
		vk->vkCmdPipelineBarrier(t.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier,
					 0, NULL, 0, NULL);
	}
	st = vulkan_check(vk->vkEndCommandBuffer(t.cmd), s->handle->dev->index, "vkEndCommandBuffer");
	return st == DATAFLOW_OK ? vulkan_stream_add(s, &t) : st;
}

/* One direction, a chunk at a time: inbound = host copy into staging, then staging -> device
 * (the copy releases the staging buffer); outbound = device -> staging, then the host copy
 * (which releases it). */
static Dataflow_Status host_transfer(Dataflow_Handle *h, int stream_id, int inbound, void *host, const void *dev,
				     uint64_t size)
{
	Vulkan_Handle *vh = vulkan_of(h);
	Vulkan_Stream *s = &vh->streams[stream_id];
	VkBuffer buffer;
	uint64_t off;
	Dataflow_Status st = lookup(vh, dev, size, &buffer, &off);
	for (uint64_t done = 0; done < size && st == DATAFLOW_OK; done += CHUNK_BYTES) {
		uint64_t n = size - done < CHUNK_BYTES ? size - done : CHUNK_BYTES;
		VkBuffer staging;
		VkDeviceMemory memory;
		void *mapped;
		Host_Copy *c = malloc(sizeof(*c));
		st = c ? staging_create(vh->dev, n, &staging, &memory, &mapped)
		       : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s transfer: no memory", inbound ? "inbound" : "outbound");
		if (st != DATAFLOW_OK) {
			free(c);
			break;
		}
		char *at = (char *)host + done;
		*c = inbound ? (Host_Copy){mapped, at, n, vh->dev, VK_NULL_HANDLE, VK_NULL_HANDLE}
			     : (Host_Copy){at, mapped, n, vh->dev, staging, memory};
		Vulkan_Task t = {.run = host_copy, .arg = c};
		int queued = 0; /* the host copy is queued: it frees c */
		if (inbound) {
			st = vulkan_stream_add(s, &t);
			queued = st == DATAFLOW_OK;
			if (st == DATAFLOW_OK)
				st = copy(s, staging, 0, buffer, off + done, n, 0, staging, memory);
		} else {
			st = copy(s, buffer, off + done, staging, 0, n, 1, VK_NULL_HANDLE, VK_NULL_HANDLE);
			if (st == DATAFLOW_OK)
				st = vulkan_stream_add(s, &t);
			queued = st == DATAFLOW_OK;
		}
		if (st != DATAFLOW_OK) {
			if (!queued)
				free(c);
			/* queued work may still use the staging buffer: wait for the stream first */
			vulkan_sync_stream(h, stream_id);
			vulkan_buffer_destroy(vh->dev, staging, memory);
		}
	}
	return st;
}

Dataflow_Status vulkan_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					       uint64_t size)
{
	return host_transfer(h, stream_id, 1, (void *)host_src, dev_dst, size);
}

Dataflow_Status vulkan_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
						uint64_t size)
{
	return host_transfer(h, stream_id, 0, host_dst, dev_src, size);
}

Dataflow_Status vulkan_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, Dataflow_Handle *dst_owner,
					    const void *dev_src, Dataflow_Handle *src_owner, uint64_t size)
{
	VkBuffer src, dst;
	uint64_t src_off, dst_off;
	Dataflow_Status st = lookup(vulkan_of(dst_owner), dev_dst, size, &dst, &dst_off);
	if (st == DATAFLOW_OK)
		st = lookup(vulkan_of(src_owner), dev_src, size, &src, &src_off);
	if (st == DATAFLOW_OK)
		st = copy(&vulkan_of(h)->streams[stream_id], src, src_off, dst, dst_off, size, 0, VK_NULL_HANDLE,
			  VK_NULL_HANDLE);
	return st;
}

/* vkCmdFillBuffer writes whole 4-byte words at 4-byte offsets; the bytes before and after
 * those come from the handle's byte table (byte v at offset 4 * v). */
Dataflow_Status vulkan_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	Vulkan_Handle *vh = vulkan_of(h);
	Vulkan_Stream *s = &vh->streams[stream_id];
	const Vulkan_Functions *vk = vh->vk;
	VkBuffer dst;
	uint64_t off;
	Dataflow_Status st = lookup(vh, ptr, size, &dst, &off);
	Vulkan_Task t = {0};
	if (st == DATAFLOW_OK)
		st = vulkan_stream_begin(s, 0, &t.cmd);
	if (st != DATAFLOW_OK)
		return st;
	uint64_t head = (4 - off % 4) % 4, end = off + size;
	if (head > size)
		head = size;
	uint64_t body = (size - head) / 4 * 4, tail = size - head - body;
	VkBufferCopy ends[2] = {{4ull * value, off, head}, {4ull * value, end - tail, tail}};
	if (body)
		vk->vkCmdFillBuffer(t.cmd, dst, off + head, body, 0x01010101u * value);
	for (int i = 0; i < 2; i++)
		if (ends[i].size)
			vk->vkCmdCopyBuffer(t.cmd, vh->bytes_buffer, dst, 1, &ends[i]);
	st = vulkan_check(vk->vkEndCommandBuffer(t.cmd), vh->dev->index, "vkEndCommandBuffer");
	return st == DATAFLOW_OK ? vulkan_stream_add(s, &t) : st;
}
