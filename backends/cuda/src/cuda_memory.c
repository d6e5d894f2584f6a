#include <stdio.h>

#include "cuda_backend.h"

/* Raw device memory: cuMemAlloc'ed blocks. The ledger in libdataflow accounts them against the
 * handle's capacity, checks every pointer, and calls cuda_mem_release only once every stream
 * has passed the free, so a free never waits for the device here. A released block is kept for
 * the next allocation of its size (cuda_free_cache.h) rather than given to cuMemFree, which
 * may synchronize the device; kept blocks are given back when a new one would take what the
 * handle holds past its capacity, or cuMemAlloc finds no memory. */

/* Gives kept blocks back until `need` more bytes fit the capacity (all of them for
 * UINT64_MAX); with h->cache_lock held. */
static void give_back(Cuda_Handle *h, uint64_t need)
{
	uint64_t size;
	uintptr_t ptr;
	while ((need == UINT64_MAX || h->held + need > h->capacity) &&
	       (ptr = cuda_free_cache_pop(&h->free_cache, &size)) != 0) {
		h->cu->cuMemFree((CUdeviceptr)ptr);
		h->held -= size;
	}
}

void cuda_free_cache_flush(Cuda_Handle *h)
{
	pthread_mutex_lock(&h->cache_lock);
	give_back(h, UINT64_MAX);
	pthread_mutex_unlock(&h->cache_lock);
}

Dataflow_Status cuda_mem_alloc(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "alloc_mem"));
	Dataflow_Status st = DATAFLOW_OK;
	pthread_mutex_lock(&ch->cache_lock);
	CUdeviceptr dptr = cuda_free_cache_take(&ch->free_cache, size);
	if (!dptr) {
		give_back(ch, size);
		CUresult r = ch->cu->cuMemAlloc(&dptr, (size_t)size);
		if (r == CUDA_ERROR_OUT_OF_MEMORY && ch->free_cache.count) { /* another handle or process took it */
			give_back(ch, UINT64_MAX);
			r = ch->cu->cuMemAlloc(&dptr, (size_t)size);
		}
		char what[96];
		snprintf(what, sizeof(what), "cuMemAlloc(%llu bytes)", (unsigned long long)size);
		st = cuda_check(r, h->device_index, what);
		if (st == DATAFLOW_OK)
			ch->held += size;
	}
	pthread_mutex_unlock(&ch->cache_lock);
	*ptr = st == DATAFLOW_OK ? (void *)(uintptr_t)dptr : NULL;
	return st;
}

void cuda_mem_release(Dataflow_Handle *h, void *ptr, uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	if (cuda_enter(ch, "free_mem") != DATAFLOW_OK)
		return;
	pthread_mutex_lock(&ch->cache_lock);
	if (!cuda_free_cache_put(&ch->free_cache, (uintptr_t)ptr, size)) {
		ch->cu->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
		ch->held -= size;
	}
	pthread_mutex_unlock(&ch->cache_lock);
}

Dataflow_Status cuda_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "set_mem"));
	return cuda_check(ch->cu->cuMemsetD8Async((CUdeviceptr)(uintptr_t)ptr, value, (size_t)size,
						  ch->streams[stream_id].stream),
			  h->device_index, "cuMemsetD8Async");
}

/* Page-locks host memory (cuMemHostRegister, flags passed through) so transfers from and to
 * it run asynchronously at full speed. */
Dataflow_Status cuda_register_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "enable_access_to_host_mem"));
	char what[96];
	snprintf(what, sizeof(what), "cuMemHostRegister(%p, %llu bytes)", ptr, (unsigned long long)size);
	return cuda_check(ch->cu->cuMemHostRegister(ptr, (size_t)size, flags), h->device_index, what);
}

void cuda_unregister_host_mem(Dataflow_Handle *h, void *ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	if (cuda_enter(ch, "disable_access_to_host_mem") == DATAFLOW_OK)
		ch->cu->cuMemHostUnregister(ptr);
}

/* Two handles of one device share its primary context: their memory is mutually accessible
 * already. Across devices the contexts get peer access. */
Dataflow_Status cuda_enable_peer(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Cuda_Handle *ch = cuda_of(h), *p = cuda_of(peer);
	if (p->device == ch->device)
		return DATAFLOW_OK;
	DATAFLOW_TRY(cuda_enter(ch, "enable_access_to_peer_mem"));
	CUresult r = ch->cu->cuCtxEnablePeerAccess(p->ctx, 0);
	char what[96];
	snprintf(what, sizeof(what), "cuCtxEnablePeerAccess(to cuda:%d)", peer->device_index);
	return r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED ? DATAFLOW_OK : cuda_check(r, h->device_index, what);
}

void cuda_disable_peer(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Cuda_Handle *ch = cuda_of(h), *p = cuda_of(peer);
	if (p->device != ch->device && cuda_enter(ch, "disable_access_to_peer_mem") == DATAFLOW_OK)
		ch->cu->cuCtxDisablePeerAccess(p->ctx);
}
