#include <stdio.h>

#include "cuda_backend.h"

/* Raw device memory: one cuMemAlloc per allocation. The ledger in libdataflow accounts it
 * against the handle's capacity, checks every pointer, and calls cuda_mem_release only once
 * every stream has passed the free, so a free never waits for the device here. (cuMemFree may
 * itself synchronize with the device, a driver choice the ledger cannot see; it runs when a
 * later call reaps the free, not in the free.) */

Dataflow_Status cuda_mem_alloc(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, "alloc_mem");
	if (st != DATAFLOW_OK)
		return st;
	CUdeviceptr dptr = 0;
	char what[96];
	snprintf(what, sizeof(what), "cuMemAlloc(%llu bytes)", (unsigned long long)size);
	st = cuda_check(ch->cu->cuMemAlloc(&dptr, (size_t)size), h->device_index, what);
	*ptr = (void *)(uintptr_t)dptr;
	return st;
}

void cuda_mem_release(Dataflow_Handle *h, void *ptr, uint64_t size)
{
	(void)size;
	Cuda_Handle *ch = cuda_of(h);
	if (cuda_enter(ch, "free_mem") == DATAFLOW_OK)
		ch->cu->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
}

Dataflow_Status cuda_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, "set_mem");
	if (st != DATAFLOW_OK)
		return st;
	return cuda_check(ch->cu->cuMemsetD8Async((CUdeviceptr)(uintptr_t)ptr, value, (size_t)size,
						  ch->streams[stream_id].stream),
			  h->device_index, "cuMemsetD8Async");
}

/* Page-locks host memory (cuMemHostRegister, flags passed through) so transfers from and to
 * it run asynchronously at full speed. */
Dataflow_Status cuda_register_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, "enable_access_to_host_mem");
	if (st != DATAFLOW_OK)
		return st;
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
	Dataflow_Status st = cuda_enter(ch, "enable_access_to_peer_mem");
	if (st != DATAFLOW_OK)
		return st;
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
