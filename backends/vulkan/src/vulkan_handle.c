#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan_backend.h"

/* Host memory is reached through staging copies, so registering it has nothing to do. */
static Dataflow_Status vulkan_register_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	(void)h, (void)ptr, (void)size, (void)flags;
	return DATAFLOW_OK;
}

/* libdataflow has waited for the queued work, destroyed the ops and released the memory. */
static void vulkan_destroy(Dataflow_Handle *h)
{
	Vulkan_Handle *vh = vulkan_of(h);
	if (vh->dev) {
		vulkan_streams_destroy(vh);
		vulkan_pipelines_destroy(vh);
		vulkan_memory_destroy(vh);
		vulkan_buffer_destroy(vh->dev, vh->bytes_buffer, vh->bytes_memory);
		vulkan_device_release(vh->dev);
	}
	pthread_mutex_destroy(&vh->lock);
	free(vh);
}

static const Dataflow_Backend_Interface vulkan_iface = {
	DATAFLOW_BACKEND_ENTRIES(vulkan),
	.register_host_mem = vulkan_register_host_mem,
	.unregister_host_mem = NULL,
	.enable_peer = vulkan_enable_peer,
	.disable_peer = NULL,
	.submit_inbound_transfer = vulkan_submit_inbound_transfer,
	.submit_outbound_transfer = vulkan_submit_outbound_transfer,
	.submit_peer_transfer = vulkan_submit_peer_transfer,
};

/* The byte table set_mem copies unaligned ends from: byte v at offsets 4v .. 4v + 3. */
static Dataflow_Status make_bytes_buffer(Vulkan_Handle *h)
{
	Vulkan_Device *d = h->dev;
	void *mapped;
	Dataflow_Status st = vulkan_buffer_create(d, 1024, d->staging_type, &h->bytes_buffer, &h->bytes_memory);
	if (st == DATAFLOW_OK)
		st = vulkan_check(h->vk->vkMapMemory(d->device, h->bytes_memory, 0, VK_WHOLE_SIZE, 0, &mapped), d->index,
				  "vkMapMemory");
	if (st == DATAFLOW_OK)
		for (int i = 0; i < 1024; i++)
			((uint8_t *)mapped)[i] = (uint8_t)(i / 4);
	return st;
}

/* Default capacity: the device-local heap; a request is held to it. */
static uint64_t capacity_of(const Vulkan_Device *d, uint64_t requested)
{
	uint64_t heap = 0;
	for (uint32_t i = 0; i < d->memory.memoryHeapCount; i++)
		if (d->memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT && d->memory.memoryHeaps[i].size > heap)
			heap = d->memory.memoryHeaps[i].size;
	return !requested || requested > heap ? heap : requested;
}

Dataflow_Status dataflow_vulkan_backend_init(Dataflow_Handle *h, const Dataflow_Backend_Params *params,
					     uint64_t *capacity)
{
	Dataflow_Status st = dataflow_backend_options_parse("vulkan", params->options, NULL, 0);
	if (st != DATAFLOW_OK)
		return st;
	Vulkan_Handle *vh = calloc(1, sizeof(*vh));
	if (!vh)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "vulkan backend: no memory for the handle");
	vh->handle = h;
	pthread_mutex_init(&vh->lock, NULL);
	h->ctx = vh;
	/* The default ops (launch functions, SPIR-V, matmul) live in this library. */
	Dl_info info;
	if (dladdr((void *)&dataflow_vulkan_backend_init, &info) && info.dli_fname)
		snprintf(vh->ops_library_path, sizeof(vh->ops_library_path), "%s", info.dli_fname);
	st = vulkan_device_acquire(params->device_index, &vh->dev);
	if (st == DATAFLOW_OK) {
		vh->vk = vh->dev->vk;
		*capacity = capacity_of(vh->dev, params->device_memory_bytes);
		st = make_bytes_buffer(vh);
	}
	if (st == DATAFLOW_OK)
		st = vulkan_streams_create(vh, params->num_streams);
	if (st != DATAFLOW_OK) {
		char message[1024];
		snprintf(message, sizeof(message), "%s", dataflow_last_error());
		vulkan_destroy(h);
		h->ctx = NULL;
		return dataflow_set_error(st, "%s", message);
	}
	h->iface = &vulkan_iface;
	h->default_ops_library = vh->ops_library_path;
	return DATAFLOW_OK;
}
