#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

Dataflow_Status cuda_check_fault(Cuda_Handle *h, CUresult result, const char *what)
{
	Dataflow_Status st = cuda_check(result, h->handle->device_index, what);
	if (st == DATAFLOW_OK || !cuda_error_is_sticky(result))
		return st;
	char message[1024];
	snprintf(message, sizeof(message), "%s", dataflow_last_error());
	pthread_mutex_lock(&h->lock);
	if (!atomic_load(&h->lost)) {
		snprintf(h->lost_message, sizeof(h->lost_message), "%s", message);
		atomic_store(&h->lost, 1);
	}
	pthread_mutex_unlock(&h->lock);
	/* CUDA_LAUNCH_BLOCKING=1 makes each launch wait for its kernel, so the fault is the
	 * failing launch's own error, naming its kernel */
	return dataflow_set_error(st,
				  "%s; the device's context is lost: close the handle (every later call on it fails, "
				  "as does CUDA work in this process); run with CUDA_LAUNCH_BLOCKING=1 to pin the fault "
				  "on one launch",
				  message);
}

Dataflow_Status cuda_enter(Cuda_Handle *h, const char *what)
{
	if (atomic_load(&h->lost)) {
		pthread_mutex_lock(&h->lock);
		Dataflow_Status st = dataflow_set_error(DATAFLOW_ERR_BACKEND,
							"%s: cuda:%d is unusable since a device fault lost its context "
							"(%s); close the handle",
							what, h->handle->device_index, h->lost_message);
		pthread_mutex_unlock(&h->lock);
		return st;
	}
	if (cuda_host_fn_handle)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: called from a host op; CUDA forbids API calls inside host functions "
					  "(submit the work from the caller's thread)",
					  what);
	return cuda_check(h->cu->cuCtxSetCurrent(h->ctx), h->handle->device_index, "cuCtxSetCurrent");
}

static int cuda_on_worker(Dataflow_Handle *h)
{
	return cuda_host_fn_handle == cuda_of(h);
}

/* libdataflow has waited for the queued work, destroyed the ops and released the memory. */
static void cuda_destroy(Dataflow_Handle *h)
{
	Cuda_Handle *ch = cuda_of(h);
	if (ch->ctx) {
		ch->cu->cuCtxSetCurrent(ch->ctx);
		cuda_free_cache_flush(ch);
		cuda_modules_destroy(ch);
		cuda_streams_destroy(ch);
		ch->cu->cuDevicePrimaryCtxRelease(ch->device);
	}
	pthread_mutex_destroy(&ch->cache_lock);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
}

static const Dataflow_Backend_Interface cuda_iface = {
	DATAFLOW_BACKEND_ENTRIES(cuda),
	.register_host_mem = cuda_register_host_mem,
	.unregister_host_mem = cuda_unregister_host_mem,
	.enable_peer = cuda_enable_peer,
	.disable_peer = cuda_disable_peer,
	.submit_inbound_transfer = cuda_submit_inbound_transfer,
	.submit_outbound_transfer = cuda_submit_outbound_transfer,
	.submit_peer_transfer = cuda_submit_peer_transfer,
};

/* The process keeps one reference to each device's primary context from its first handle on:
 * otherwise closing the last handle destroys the context (its modules, its memory pools) and
 * the next open creates it again, hundreds of milliseconds each time. */
static void keep_primary_context(const Cuda_Driver *cu, CUdevice device)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static CUdevice kept[64];
	static int num_kept;
	pthread_mutex_lock(&lock);
	int found = 0;
	for (int i = 0; i < num_kept && !found; i++)
		found = kept[i] == device;
	CUcontext ctx;
	if (!found && num_kept < 64 && cu->cuDevicePrimaryCtxRetain(&ctx, device) == CUDA_SUCCESS)
		kept[num_kept++] = device;
	pthread_mutex_unlock(&lock);
}

/* Finds the device and retains its primary context (shared with every other user of the
 * device in this process, as the runtime API does). */
static Dataflow_Status open_device(Cuda_Handle *h, int index)
{
	const Cuda_Driver *cu = h->cu;
	int count = 0;
	Dataflow_Status st = cuda_check(cu->cuDeviceGetCount(&count), index, "cuDeviceGetCount");
	if (st != DATAFLOW_OK)
		return st;
	if (count == 0)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "cuda backend: the driver loaded but reports no CUDA device");
	if (index >= count)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "cuda backend: cuda:%d requested, %d device(s)",
					  index, count);
	st = cuda_check(cu->cuDeviceGet(&h->device, index), index, "cuDeviceGet");
	if (st == DATAFLOW_OK)
		st = cuda_check(cu->cuDeviceGetName(h->device_name, sizeof(h->device_name), h->device), index,
				"cuDeviceGetName");
	if (st == DATAFLOW_OK)
		st = cuda_check(cu->cuDeviceGetAttribute(&h->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
							 h->device),
				index, "cuDeviceGetAttribute(compute capability)");
	if (st == DATAFLOW_OK)
		st = cuda_check(cu->cuDeviceGetAttribute(&h->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
							 h->device),
				index, "cuDeviceGetAttribute(compute capability)");
	if (st == DATAFLOW_OK)
		st = cuda_check(cu->cuDevicePrimaryCtxRetain(&h->ctx, h->device), index, "cuDevicePrimaryCtxRetain");
	if (st == DATAFLOW_OK)
		keep_primary_context(cu, h->device);
	if (st == DATAFLOW_OK)
		st = cuda_check(cu->cuCtxSetCurrent(h->ctx), index, "cuCtxSetCurrent");
	return st;
}

/* Default capacity: what the device has free now (other processes and handles included); a
 * request is held to what the device has in all. */
static Dataflow_Status find_capacity(Cuda_Handle *h, uint64_t requested, uint64_t *capacity)
{
	size_t free_bytes = 0, total_bytes = 0;
	Dataflow_Status st = cuda_check(h->cu->cuMemGetInfo(&free_bytes, &total_bytes), h->handle->device_index,
					"cuMemGetInfo");
	if (st != DATAFLOW_OK)
		return st;
	*capacity = !requested ? (uint64_t)free_bytes : requested < total_bytes ? requested : (uint64_t)total_bytes;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_cuda_backend_init(Dataflow_Handle *h, const Dataflow_Backend_Params *params,
					   uint64_t *capacity)
{
	const Cuda_Driver *cu;
	Dataflow_Status st = dataflow_backend_options_parse("cuda", params->options, NULL, 0);
	if (st == DATAFLOW_OK)
		st = cuda_driver_load(&cu);
	if (st != DATAFLOW_OK)
		return st;
	Cuda_Handle *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda backend: no memory for the handle");
	ch->handle = h;
	ch->cu = cu;
	pthread_mutex_init(&ch->lock, NULL);
	pthread_mutex_init(&ch->cache_lock, NULL);
	h->ctx = ch;
	/* The default ops (launch functions, kernel sources, matmul) live in this library. */
	Dl_info info;
	if (dladdr((void *)&dataflow_cuda_backend_init, &info) && info.dli_fname)
		snprintf(ch->ops_library_path, sizeof(ch->ops_library_path), "%s", info.dli_fname);

	st = open_device(ch, params->device_index);
	if (st == DATAFLOW_OK)
		st = find_capacity(ch, params->device_memory_bytes, capacity);
	if (st == DATAFLOW_OK)
		ch->capacity = *capacity;
	if (st == DATAFLOW_OK)
		st = cuda_streams_create(ch, params->num_streams, params->stream_priorities);
	if (st != DATAFLOW_OK) {
		char message[1024];
		snprintf(message, sizeof(message), "%s", dataflow_last_error());
		cuda_destroy(h);
		h->ctx = NULL;
		return dataflow_set_error(st, "%s", message);
	}
	h->iface = &cuda_iface;
	h->default_ops_library = ch->ops_library_path;
	return DATAFLOW_OK;
}
