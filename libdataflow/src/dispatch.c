/* The public entry points: check the handle, then call the backend. */
#include "dataflow/handle.h"

#define CHECK_HANDLE(h, what)                                                                          \
	do {                                                                                           \
		if (!(h))                                                                              \
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: handle is NULL", what); \
	} while (0)

const char *dataflow_handle_backend_name(const Dataflow_Handle *h)
{
	return h ? h->backend_name : "";
}

int dataflow_handle_device_index(const Dataflow_Handle *h)
{
	return h ? h->device_index : -1;
}

int dataflow_handle_num_streams(const Dataflow_Handle *h)
{
	return h ? h->num_streams : 0;
}

const char *dataflow_handle_default_ops_library(const Dataflow_Handle *h)
{
	return h ? h->default_ops_library : NULL;
}

uint64_t dataflow_handle_host_syncs(const Dataflow_Handle *h)
{
	return h ? __atomic_load_n(&h->num_host_syncs, __ATOMIC_RELAXED) : 0;
}

int dataflow_op_is_registered(Dataflow_Handle *h, const Op_Skeleton *skeleton)
{
	return h && skeleton && h->op_table && dataflow_op_table_lookup(h->op_table, skeleton->fingerprint);
}

Dataflow_Status dataflow_register_native_code(Dataflow_Handle *handle, const char *code_path,
					      const char *launch_library_path, int num_ops,
					      const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					      const char *const *launch_symbols, const char *const *init_symbols,
					      int flags)
{
	CHECK_HANDLE(handle, "register_native_code");
	return handle->register_native_code(handle, code_path, launch_library_path, num_ops, skeletons, kernel_symbols, launch_symbols, init_symbols, flags);
}

Dataflow_Status dataflow_register_external_code(Dataflow_Handle *handle, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, int flags)
{
	CHECK_HANDLE(handle, "register_external_code");
	return handle->register_external_code(handle, library_path, num_ops, skeletons, func_symbols, init_symbols, flags);
}

Dataflow_Status dataflow_register_external_func(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags)
{
	CHECK_HANDLE(handle, "register_external_func");
	return handle->register_external_func(handle, skeleton, func, state, flags);
}

Dataflow_Status dataflow_submit_op(Dataflow_Handle *handle, const Op *op, int stream_id)
{
	CHECK_HANDLE(handle, "submit_op");
	return handle->submit_op(handle, op, stream_id);
}

Dataflow_Status dataflow_submit_host_op(Dataflow_Handle *handle, Dataflow_Host_Fn func, void *arg, int stream_id)
{
	CHECK_HANDLE(handle, "submit_host_op");
	return handle->submit_host_op(handle, func, arg, stream_id);
}

Dataflow_Status dataflow_get_stream_state(Dataflow_Handle *handle, int stream_id, Dataflow_Stream_State *state)
{
	CHECK_HANDLE(handle, "get_stream_state");
	return handle->get_stream_state(handle, stream_id, state);
}

Dataflow_Status dataflow_submit_dependency(Dataflow_Handle *handle, int stream_id,
					   const Dataflow_Stream_State *state)
{
	CHECK_HANDLE(handle, "submit_dependency");
	return handle->submit_dependency(handle, stream_id, state);
}

Dataflow_Status dataflow_sync_stream(Dataflow_Handle *handle, int stream_id)
{
	CHECK_HANDLE(handle, "sync_stream");
	__atomic_fetch_add(&handle->num_host_syncs, 1, __ATOMIC_RELAXED);
	return handle->sync_stream(handle, stream_id);
}

Dataflow_Status dataflow_sync_handle(Dataflow_Handle *handle)
{
	CHECK_HANDLE(handle, "sync_handle");
	__atomic_fetch_add(&handle->num_host_syncs, 1, __ATOMIC_RELAXED);
	return handle->sync_handle(handle);
}

Dataflow_Status dataflow_alloc_mem(Dataflow_Handle *handle, uint64_t size_bytes, void **ptr)
{
	CHECK_HANDLE(handle, "alloc_mem");
	return handle->alloc_mem(handle, size_bytes, ptr);
}

Dataflow_Status dataflow_free_mem(Dataflow_Handle *handle, void *ptr)
{
	CHECK_HANDLE(handle, "free_mem");
	return handle->free_mem(handle, ptr);
}

Dataflow_Status dataflow_set_mem(Dataflow_Handle *handle, int stream_id, void *ptr, uint8_t value,
				 uint64_t size_bytes)
{
	CHECK_HANDLE(handle, "set_mem");
	return handle->set_mem(handle, stream_id, ptr, value, size_bytes);
}

Dataflow_Status dataflow_enable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr, uint64_t size_bytes,
						   unsigned int flags)
{
	CHECK_HANDLE(handle, "enable_access_to_host_mem");
	return handle->enable_access_to_host_mem(handle, host_ptr, size_bytes, flags);
}

Dataflow_Status dataflow_disable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr)
{
	CHECK_HANDLE(handle, "disable_access_to_host_mem");
	return handle->disable_access_to_host_mem(handle, host_ptr);
}

Dataflow_Status dataflow_enable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer)
{
	CHECK_HANDLE(handle, "enable_access_to_peer_mem");
	return handle->enable_access_to_peer_mem(handle, peer);
}

Dataflow_Status dataflow_disable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer)
{
	CHECK_HANDLE(handle, "disable_access_to_peer_mem");
	return handle->disable_access_to_peer_mem(handle, peer);
}

Dataflow_Status dataflow_query_mem(Dataflow_Handle *handle, uint64_t *capacity_bytes, uint64_t *in_use_bytes)
{
	CHECK_HANDLE(handle, "query_mem");
	return handle->query_mem(handle, capacity_bytes, in_use_bytes);
}

Dataflow_Status dataflow_check_mem_range(Dataflow_Handle *handle, const void *ptr, uint64_t size_bytes,
					 const char *what)
{
	CHECK_HANDLE(handle, "check_mem_range");
	return handle->check_mem_range(handle, ptr, size_bytes, what);
}

Dataflow_Status dataflow_submit_inbound_transfer(Dataflow_Handle *handle, int stream_id, void *dev_dst,
						 const void *host_src, uint64_t size_bytes)
{
	CHECK_HANDLE(handle, "submit_inbound_transfer");
	return handle->submit_inbound_transfer(handle, stream_id, dev_dst, host_src, size_bytes);
}

Dataflow_Status dataflow_submit_outbound_transfer(Dataflow_Handle *handle, int stream_id, void *host_dst,
						  const void *dev_src, uint64_t size_bytes)
{
	CHECK_HANDLE(handle, "submit_outbound_transfer");
	return handle->submit_outbound_transfer(handle, stream_id, host_dst, dev_src, size_bytes);
}

Dataflow_Status dataflow_submit_peer_transfer(Dataflow_Handle *handle, int stream_id, void *dev_dst,
					      const void *dev_src, uint64_t size_bytes)
{
	CHECK_HANDLE(handle, "submit_peer_transfer");
	return handle->submit_peer_transfer(handle, stream_id, dev_dst, dev_src, size_bytes);
}
