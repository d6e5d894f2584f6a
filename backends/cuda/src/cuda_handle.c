#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* Identifies CUDA stream states; compared by address. */
const char cuda_backend_tag[] = "cuda";

Dataflow_Status cuda_check_fault(Cuda_Handle *h, CUresult result, const char *what)
{
	Dataflow_Status st = cuda_check(result, h->base.device_index, what);
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

Dataflow_Status cuda_enter_handle(Cuda_Handle *h, const char *what)
{
	if (atomic_load(&h->lost)) {
		pthread_mutex_lock(&h->lock);
		Dataflow_Status st = dataflow_set_error(DATAFLOW_ERR_BACKEND,
							"%s: cuda:%d is unusable since a device fault lost its context "
							"(%s); close the handle",
							what, h->base.device_index, h->lost_message);
		pthread_mutex_unlock(&h->lock);
		return st;
	}
	if (cuda_in_host_fn)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: called from a host op; CUDA forbids API calls inside host functions "
					  "(submit the work from the caller's thread)",
					  what);
	return cuda_check(h->cu->cuCtxSetCurrent(h->ctx), h->base.device_index, "cuCtxSetCurrent");
}

Dataflow_Status cuda_enter(Cuda_Handle *h, int stream_id, const char *what)
{
	Dataflow_Status st = dataflow_check_stream_id(&h->base, stream_id, what);
	return st != DATAFLOW_OK ? st : cuda_enter_handle(h, what);
}

static void cuda_destroy(Dataflow_Handle *h)
{
	Cuda_Handle *ch = cuda_of(h);
	if (ch->ctx) {
		ch->cu->cuCtxSetCurrent(ch->ctx);
		cuda_sync_handle(h);
		/* op states may free device memory (matmul workspaces), so they go first */
		if (h->op_table)
			dataflow_op_table_destroy(h->op_table, dataflow_op_record_destroy);
		cuda_modules_destroy(ch);
		cuda_memory_release_all(ch);
		cuda_streams_destroy(ch);
		ch->cu->cuDevicePrimaryCtxRelease(ch->device);
	} else if (h->op_table) {
		dataflow_op_table_destroy(h->op_table, dataflow_op_record_destroy);
	}
	dataflow_libraries_close(&ch->libraries);
	block_list_free(&ch->live);
	block_list_free(&ch->host_ranges);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
}

static void fill_vtable(Dataflow_Handle *h)
{
	h->register_native_code = cuda_register_native_code;
	h->register_external_code = cuda_register_external_code;
	h->register_external_func = cuda_register_external_func;
	h->submit_op = cuda_submit_op;
	h->submit_host_op = cuda_submit_host_op;
	h->get_stream_state = cuda_get_stream_state;
	h->submit_dependency = cuda_submit_dependency;
	h->sync_stream = cuda_sync_stream;
	h->sync_handle = cuda_sync_handle;
	h->alloc_mem = cuda_alloc_mem;
	h->free_mem = cuda_free_mem;
	h->set_mem = cuda_set_mem;
	h->enable_access_to_host_mem = cuda_enable_access_to_host_mem;
	h->disable_access_to_host_mem = cuda_disable_access_to_host_mem;
	h->enable_access_to_peer_mem = cuda_enable_access_to_peer_mem;
	h->disable_access_to_peer_mem = cuda_disable_access_to_peer_mem;
	h->query_mem = cuda_query_mem;
	h->check_mem_range = cuda_check_mem_range;
	h->submit_inbound_transfer = cuda_submit_inbound_transfer;
	h->submit_outbound_transfer = cuda_submit_outbound_transfer;
	h->submit_peer_transfer = cuda_submit_peer_transfer;
	h->destroy = cuda_destroy;
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
		st = cuda_check(cu->cuCtxSetCurrent(h->ctx), index, "cuCtxSetCurrent");
	return st;
}

/* Default capacity: what the device has free now (other processes and handles included). */
static Dataflow_Status set_capacity(Cuda_Handle *h, uint64_t requested)
{
	size_t free_bytes = 0, total_bytes = 0;
	Dataflow_Status st = cuda_check(h->cu->cuMemGetInfo(&free_bytes, &total_bytes), h->base.device_index,
					"cuMemGetInfo");
	if (st != DATAFLOW_OK)
		return st;
	h->capacity = requested ? requested : (uint64_t)free_bytes;
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_cuda_handle_create(int device_index, const Dataflow_Handle_Config *config,
					    Dataflow_Handle **out)
{
	const Cuda_Driver *cu;
	Dataflow_Status st = cuda_driver_load(&cu);
	if (st != DATAFLOW_OK)
		return st;
	Cuda_Handle *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda backend: no memory for the handle");
	Dataflow_Handle *h = &ch->base;
	h->version = DATAFLOW_HANDLE_VERSION;
	h->backend_name = cuda_backend_tag;
	h->device_index = device_index;
	h->num_streams = 0; /* raised as streams are created, so destroy releases only those */
	h->num_threads = 1;
	h->ctx = ch;
	ch->cu = cu;
	pthread_mutex_init(&ch->lock, NULL);
	fill_vtable(h);
	/* The default ops (launch functions, kernel sources, matmul) live in this library. */
	Dl_info info;
	if (dladdr((void *)&dataflow_cuda_handle_create, &info) && info.dli_fname)
		snprintf(ch->ops_library_path, sizeof(ch->ops_library_path), "%s", info.dli_fname);
	h->default_ops_library = ch->ops_library_path;

	st = open_device(ch, device_index);
	if (st == DATAFLOW_OK)
		st = set_capacity(ch, config->device_memory_bytes);
	if (st == DATAFLOW_OK && !(h->op_table = dataflow_op_table_create()))
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "cuda backend: no memory for the op table");
	if (st == DATAFLOW_OK) {
		h->num_streams = config->num_streams > 0 ? config->num_streams : 4;
		st = cuda_streams_create(ch, config->stream_priorities);
	}
	if (st != DATAFLOW_OK) {
		char message[1024];
		snprintf(message, sizeof(message), "%s", dataflow_last_error());
		cuda_destroy(h);
		return dataflow_set_error(st, "%s", message);
	}
	*out = h;
	return DATAFLOW_OK;
}
