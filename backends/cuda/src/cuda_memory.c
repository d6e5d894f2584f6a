#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* Device memory: one cuMemAlloc per allocation, accounted against the handle's capacity in
 * 256-byte units as the host arena does (so the same plans fit both backends). Live
 * allocations sit in a block list keyed by device address: free_mem finds exact starts,
 * check_mem_range exact extents (the bytes requested). */

static uint64_t round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

Dataflow_Status cuda_alloc_mem(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: output pointer is NULL");
	*ptr = NULL;
	if (size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: size_bytes must be > 0, got 0");
	if (size > ch->capacity)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes: capacity is %llu bytes",
					  (unsigned long long)size, (unsigned long long)ch->capacity);
	Dataflow_Status st = cuda_enter_handle(ch, "alloc_mem");
	if (st != DATAFLOW_OK)
		return st;
	uint64_t need = round_up(size, CUDA_ALIGN);
	/* reserve the bytes first so concurrent allocations cannot overshoot the capacity */
	pthread_mutex_lock(&ch->lock);
	uint64_t in_use = ch->in_use;
	int fits = need <= ch->capacity - in_use && block_list_reserve(&ch->live, ch->live.count + 1);
	if (fits)
		ch->in_use += need;
	pthread_mutex_unlock(&ch->lock);
	if (!fits)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes (%llu after 256-byte alignment): "
					  "capacity %llu, in use %llu",
					  (unsigned long long)size, (unsigned long long)need, (unsigned long long)ch->capacity,
					  (unsigned long long)in_use);
	CUdeviceptr dptr = 0;
	char what[96];
	snprintf(what, sizeof(what), "cuMemAlloc(%llu bytes)", (unsigned long long)size);
	st = cuda_check(ch->cu->cuMemAlloc(&dptr, (size_t)size), h->device_index, what);
	pthread_mutex_lock(&ch->lock);
	if (st == DATAFLOW_OK && !block_list_insert(&ch->live, (Block){.offset = dptr, .size = need, .requested = size}))
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "alloc_mem: no memory for the allocation list");
	if (st != DATAFLOW_OK)
		ch->in_use -= need;
	pthread_mutex_unlock(&ch->lock);
	if (st != DATAFLOW_OK) {
		if (dptr)
			ch->cu->cuMemFree(dptr);
		return st;
	}
	*ptr = (void *)(uintptr_t)dptr;
	return DATAFLOW_OK;
}

/* Waits for the handle's queued work first (the contract), then releases. */
Dataflow_Status cuda_free_mem(Dataflow_Handle *h, void *ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "free_mem: pointer is NULL");
	uint64_t off = (uint64_t)(uintptr_t)ptr;
	pthread_mutex_lock(&ch->lock);
	int i = block_list_floor(&ch->live, off);
	int found = i >= 0 && ch->live.items[i].offset == off;
	int inside = !found && i >= 0 && off < ch->live.items[i].offset + ch->live.items[i].size;
	pthread_mutex_unlock(&ch->lock);
	if (!found)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  inside ? "free: pointer %p points inside an allocation, not at its start"
						 : "free: pointer %p is not a live allocation of this handle (foreign or "
						   "already freed?)",
					  ptr);
	Dataflow_Status st = cuda_enter_handle(ch, "free_mem");
	if (st == DATAFLOW_OK)
		st = cuda_sync_handle(h);
	if (st == DATAFLOW_OK)
		st = cuda_check(ch->cu->cuMemFree((CUdeviceptr)off), h->device_index, "cuMemFree");
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&ch->lock);
	i = block_list_floor(&ch->live, off);
	if (i >= 0 && ch->live.items[i].offset == off) {
		ch->in_use -= ch->live.items[i].size;
		block_list_remove_at(&ch->live, i);
	}
	pthread_mutex_unlock(&ch->lock);
	return DATAFLOW_OK;
}

void cuda_memory_release_all(Cuda_Handle *h)
{
	for (int i = 0; i < h->live.count; i++)
		h->cu->cuMemFree((CUdeviceptr)h->live.items[i].offset);
	for (int i = 0; i < h->host_ranges.count; i++)
		h->cu->cuMemHostUnregister((void *)(uintptr_t)h->host_ranges.items[i].offset);
	for (int i = 0; i < h->num_peers; i++)
		if (h->peers[i]->device != h->device)
			h->cu->cuCtxDisablePeerAccess(h->peers[i]->ctx);
	h->live.count = h->host_ranges.count = h->num_peers = 0;
	h->in_use = 0;
}

static int contains(Cuda_Handle *h, const Block_List *list, uint64_t off, uint64_t size, const void *ptr, char *why,
		    size_t why_size)
{
	pthread_mutex_lock(&h->lock);
	int ok = block_list_contains(list, off, size, ptr, why, why_size);
	pthread_mutex_unlock(&h->lock);
	return ok;
}

Dataflow_Status cuda_check_device_range(Cuda_Handle *h, const void *ptr, uint64_t size, int allow_peer,
					Cuda_Handle **owner, const char *what)
{
	char why[256], ignored[256];
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: pointer is NULL", what);
	uint64_t off = (uint64_t)(uintptr_t)ptr;
	if (owner)
		*owner = h;
	if (contains(h, &h->live, off, size, ptr, why, sizeof(why)) ||
	    contains(h, &h->host_ranges, off, size, ptr, ignored, sizeof(ignored)))
		return DATAFLOW_OK;
	if (allow_peer) {
		pthread_mutex_lock(&h->lock);
		int n = h->num_peers;
		Cuda_Handle *peers[DATAFLOW_MAX_STREAMS];
		memcpy(peers, h->peers, (size_t)n * sizeof(*peers));
		pthread_mutex_unlock(&h->lock);
		for (int i = 0; i < n; i++) {
			if (contains(peers[i], &peers[i]->live, off, size, ptr, ignored, sizeof(ignored))) {
				if (owner)
					*owner = peers[i];
				return DATAFLOW_OK;
			}
		}
	}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s", what, why);
}

Dataflow_Status cuda_check_mem_range(Dataflow_Handle *h, const void *ptr, uint64_t size, const char *what)
{
	return cuda_check_device_range(cuda_of(h), ptr, size, 0, NULL, what ? what : "memory range");
}

Dataflow_Status cuda_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, stream_id, "set_mem");
	if (st == DATAFLOW_OK)
		st = cuda_check_device_range(ch, ptr, size, 0, NULL, "set_mem destination");
	if (st != DATAFLOW_OK)
		return st;
	return cuda_check(ch->cu->cuMemsetD8Async((CUdeviceptr)(uintptr_t)ptr, value, (size_t)size,
						  ch->streams[stream_id].stream),
			  h->device_index, "cuMemsetD8Async");
}

/* Page-locks host memory (cuMemHostRegister, flags passed through) so transfers from and to
 * it run asynchronously at full speed; kernels accept it as device-accessible, as on host. */
Dataflow_Status cuda_enable_access_to_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	Cuda_Handle *ch = cuda_of(h);
	if (!ptr || size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_host_mem: need a non-NULL pointer and size > 0, got %p, %llu",
					  ptr, (unsigned long long)size);
	Dataflow_Status st = cuda_enter_handle(ch, "enable_access_to_host_mem");
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&ch->lock);
	int i = block_list_floor(&ch->host_ranges, (uint64_t)(uintptr_t)ptr);
	int registered = i >= 0 && ch->host_ranges.items[i].offset == (uint64_t)(uintptr_t)ptr;
	int room = block_list_reserve(&ch->host_ranges, ch->host_ranges.count + 1);
	pthread_mutex_unlock(&ch->lock);
	if (registered)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "enable_access_to_host_mem: %p is already registered",
					  ptr);
	if (!room)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_host_mem: no memory");
	char what[96];
	snprintf(what, sizeof(what), "cuMemHostRegister(%p, %llu bytes)", ptr, (unsigned long long)size);
	st = cuda_check(ch->cu->cuMemHostRegister(ptr, (size_t)size, flags), h->device_index, what);
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&ch->lock);
	block_list_insert(&ch->host_ranges, (Block){.offset = (uint64_t)(uintptr_t)ptr, .size = size, .requested = size}); /* reserved above */
	pthread_mutex_unlock(&ch->lock);
	return DATAFLOW_OK;
}

Dataflow_Status cuda_disable_access_to_host_mem(Dataflow_Handle *h, void *ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	uint64_t off = (uint64_t)(uintptr_t)ptr;
	pthread_mutex_lock(&ch->lock);
	int i = block_list_floor(&ch->host_ranges, off);
	int found = i >= 0 && ch->host_ranges.items[i].offset == off;
	if (found)
		block_list_remove_at(&ch->host_ranges, i);
	pthread_mutex_unlock(&ch->lock);
	if (!found)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "disable_access_to_host_mem: %p was not registered with enable_access_to_host_mem",
					  ptr);
	Dataflow_Status st = cuda_enter_handle(ch, "disable_access_to_host_mem");
	return st != DATAFLOW_OK ? st : cuda_check(ch->cu->cuMemHostUnregister(ptr), h->device_index, "cuMemHostUnregister");
}

static int peer_index(Cuda_Handle *h, Cuda_Handle *peer)
{
	for (int i = 0; i < h->num_peers; i++)
		if (h->peers[i] == peer)
			return i;
	return -1;
}

/* Two handles of one device share its primary context: their memory is mutually
 * accessible already, so only the bookkeeping changes. */
Dataflow_Status cuda_enable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Cuda_Handle *ch = cuda_of(h);
	if (!peer || peer == h || peer->backend_name != h->backend_name)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_peer_mem: peer must be another cuda handle");
	Cuda_Handle *p = cuda_of(peer);
	Dataflow_Status st = cuda_enter_handle(ch, "enable_access_to_peer_mem");
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&ch->lock);
	int known = peer_index(ch, p) >= 0, full = ch->num_peers == DATAFLOW_MAX_STREAMS;
	pthread_mutex_unlock(&ch->lock);
	if (known || full)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "enable_access_to_peer_mem: %s",
					  known ? "access to that peer is already enabled" : "too many peers");
	if (p->device != ch->device) {
		CUresult r = ch->cu->cuCtxEnablePeerAccess(p->ctx, 0);
		char what[96];
		snprintf(what, sizeof(what), "cuCtxEnablePeerAccess(to cuda:%d)", peer->device_index);
		if (r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED && (st = cuda_check(r, h->device_index, what)) != DATAFLOW_OK)
			return st;
	}
	pthread_mutex_lock(&ch->lock);
	ch->peers[ch->num_peers++] = p;
	pthread_mutex_unlock(&ch->lock);
	return DATAFLOW_OK;
}

Dataflow_Status cuda_disable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Cuda_Handle *ch = cuda_of(h);
	pthread_mutex_lock(&ch->lock);
	int i = peer_index(ch, cuda_of(peer));
	if (i >= 0)
		ch->peers[i] = ch->peers[--ch->num_peers];
	int other_device = i >= 0 && cuda_of(peer)->device != ch->device;
	pthread_mutex_unlock(&ch->lock);
	if (i < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "disable_access_to_peer_mem: access to that peer was not enabled");
	if (!other_device)
		return DATAFLOW_OK;
	Dataflow_Status st = cuda_enter_handle(ch, "disable_access_to_peer_mem");
	return st != DATAFLOW_OK ? st
				 : cuda_check(ch->cu->cuCtxDisablePeerAccess(cuda_of(peer)->ctx), h->device_index,
					      "cuCtxDisablePeerAccess");
}

Dataflow_Status cuda_query_mem(Dataflow_Handle *h, uint64_t *capacity, uint64_t *in_use)
{
	Cuda_Handle *ch = cuda_of(h);
	pthread_mutex_lock(&ch->lock);
	if (capacity)
		*capacity = ch->capacity;
	if (in_use)
		*in_use = ch->in_use;
	pthread_mutex_unlock(&ch->lock);
	return DATAFLOW_OK;
}
