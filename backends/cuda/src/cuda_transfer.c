#include "cuda_backend.h"

/* Transfers are asynchronous copies on the named stream. Host memory registered with
 * enable_access_to_host_mem copies asynchronously via DMA; pageable memory is staged by the
 * driver (the call may return only once the source has been read). */

static Dataflow_Status check_common(Cuda_Handle *h, int stream_id, const char *what, uint64_t size)
{
	Dataflow_Status st = cuda_enter(h, stream_id, what);
	return st != DATAFLOW_OK ? st : dataflow_check_size_bytes(what, size);
}

Dataflow_Status cuda_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = check_common(ch, stream_id, "inbound transfer", size);
	if (st == DATAFLOW_OK)
		st = cuda_check_device_range(ch, dev_dst, size, 0, NULL, "inbound transfer destination");
	if (st == DATAFLOW_OK && !host_src)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "inbound transfer source: host pointer is NULL");
	if (st != DATAFLOW_OK)
		return st;
	return cuda_check(ch->cu->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dev_dst, host_src, (size_t)size,
						    ch->streams[stream_id].stream),
			  h->device_index, "cuMemcpyHtoDAsync");
}

Dataflow_Status cuda_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = check_common(ch, stream_id, "outbound transfer", size);
	if (st == DATAFLOW_OK)
		st = cuda_check_device_range(ch, dev_src, size, 0, NULL, "outbound transfer source");
	if (st == DATAFLOW_OK && !host_dst)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"outbound transfer destination: host pointer is NULL");
	if (st != DATAFLOW_OK)
		return st;
	return cuda_check(ch->cu->cuMemcpyDtoHAsync(host_dst, (CUdeviceptr)(uintptr_t)dev_src, (size_t)size,
						    ch->streams[stream_id].stream),
			  h->device_index, "cuMemcpyDtoHAsync");
}

/* Within one context (same device) a plain device-to-device copy; across devices
 * cuMemcpyPeerAsync names both contexts. */
Dataflow_Status cuda_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *dev_src,
					  uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h), *dst_owner, *src_owner;
	Dataflow_Status st = check_common(ch, stream_id, "peer transfer", size);
	if (st == DATAFLOW_OK)
		st = cuda_check_device_range(ch, dev_dst, size, 1, &dst_owner, "peer transfer destination");
	if (st == DATAFLOW_OK)
		st = cuda_check_device_range(ch, dev_src, size, 1, &src_owner, "peer transfer source");
	if (st != DATAFLOW_OK)
		return st;
	CUdeviceptr dst = (CUdeviceptr)(uintptr_t)dev_dst, src = (CUdeviceptr)(uintptr_t)dev_src;
	CUstream stream = ch->streams[stream_id].stream;
	if (dst_owner->ctx == src_owner->ctx)
		return cuda_check(ch->cu->cuMemcpyDtoDAsync(dst, src, (size_t)size, stream), h->device_index,
				  "cuMemcpyDtoDAsync");
	return cuda_check(ch->cu->cuMemcpyPeerAsync(dst, dst_owner->ctx, src, src_owner->ctx, (size_t)size, stream),
			  h->device_index, "cuMemcpyPeerAsync");
}
