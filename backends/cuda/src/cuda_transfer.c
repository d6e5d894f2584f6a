#include "cuda_backend.h"

/* Transfers are asynchronous copies on the named stream. Host memory registered with
 * enable_access_to_host_mem copies asynchronously via DMA; pageable memory is staged by the
 * driver (the call may return only once the source has been read). */

Dataflow_Status cuda_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "inbound transfer"));
	return cuda_check(ch->cu->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dev_dst, host_src, (size_t)size,
						    ch->streams[stream_id].stream),
			  h->device_index, "cuMemcpyHtoDAsync");
}

Dataflow_Status cuda_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "outbound transfer"));
	return cuda_check(ch->cu->cuMemcpyDtoHAsync(host_dst, (CUdeviceptr)(uintptr_t)dev_src, (size_t)size,
						    ch->streams[stream_id].stream),
			  h->device_index, "cuMemcpyDtoHAsync");
}

/* Within one context (same device) a plain device-to-device copy; across devices
 * cuMemcpyPeerAsync names both contexts. */
Dataflow_Status cuda_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, Dataflow_Handle *dst_owner,
					  const void *dev_src, Dataflow_Handle *src_owner, uint64_t size)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "peer transfer"));
	CUcontext dst_ctx = cuda_of(dst_owner)->ctx, src_ctx = cuda_of(src_owner)->ctx;
	CUdeviceptr dst = (CUdeviceptr)(uintptr_t)dev_dst, src = (CUdeviceptr)(uintptr_t)dev_src;
	CUstream stream = ch->streams[stream_id].stream;
	if (dst_ctx == src_ctx)
		return cuda_check(ch->cu->cuMemcpyDtoDAsync(dst, src, (size_t)size, stream), h->device_index,
				  "cuMemcpyDtoDAsync");
	return cuda_check(ch->cu->cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, (size_t)size, stream), h->device_index,
			  "cuMemcpyPeerAsync");
}
