#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"

/* Identifies host stream states; compared by address. */
const char host_backend_tag[] = "host";

static int online_cores(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

/* Default capacity: half of physical RAM, leaving room for the host side of the program. */
static uint64_t default_capacity(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || page <= 0)
		return 1ull << 30;
	return (uint64_t)pages * (uint64_t)page / 2;
}

static void host_destroy(Dataflow_Handle *h)
{
	Host_Handle *hh = host_of(h);
	for (int i = 0; i < h->num_streams; i++)
		stream_stop(&hh->streams[i]);
	compute_pool_destroy(hh->pool);
	dataflow_op_table_destroy(h->op_table, dataflow_op_record_destroy);
	dataflow_libraries_close(&hh->libraries);
	free(hh->host_ranges);
	free(hh->peers);
	free(hh->pending_frees);
	arena_destroy(&hh->arena);
	pthread_mutex_destroy(&hh->lock);
	free(hh);
}

static void fill_vtable(Dataflow_Handle *h)
{
	h->register_native_code = host_register_native_code;
	h->register_external_code = host_register_external_code;
	h->register_external_func = host_register_external_func;
	h->submit_op = host_submit_op;
	h->submit_host_op = host_submit_host_op;
	h->get_stream_state = host_get_stream_state;
	h->submit_dependency = host_submit_dependency;
	h->sync_stream = host_sync_stream;
	h->sync_handle = host_sync_handle;
	h->alloc_mem = host_alloc_mem;
	h->free_mem = host_free_mem;
	h->set_mem = host_set_mem;
	h->enable_access_to_host_mem = host_enable_access_to_host_mem;
	h->disable_access_to_host_mem = host_disable_access_to_host_mem;
	h->enable_access_to_peer_mem = host_enable_access_to_peer_mem;
	h->disable_access_to_peer_mem = host_disable_access_to_peer_mem;
	h->query_mem = host_query_mem;
	h->check_mem_range = host_check_mem_range;
	h->submit_inbound_transfer = host_submit_inbound_transfer;
	h->submit_outbound_transfer = host_submit_outbound_transfer;
	h->submit_peer_transfer = host_submit_peer_transfer;
	h->destroy = host_destroy;
}

Dataflow_Status dataflow_host_handle_create(int device_index, const Dataflow_Handle_Config *config,
					    Dataflow_Handle **out)
{
	if (device_index != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "host backend: device index must be 0 (there is one host), got %d", device_index);
	Host_Handle *hh = calloc(1, sizeof(*hh));
	if (!hh)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host backend: no memory for the handle");
	Dataflow_Handle *h = &hh->base;
	h->version = DATAFLOW_HANDLE_VERSION;
	h->backend_name = host_backend_tag;
	h->device_index = 0;
	h->num_streams = config->num_streams > 0 ? config->num_streams : 4;
	h->ctx = hh;
	/* The kernels of the default ops sit next to this library. */
	Dl_info info;
	const char *self = dladdr((void *)&dataflow_host_handle_create, &info) && info.dli_fname ? info.dli_fname : "";
	const char *slash = strrchr(self, '/');
	snprintf(hh->ops_library_path, sizeof(hh->ops_library_path), "%.*slibdataflow_host_ops.so",
		 slash ? (int)(slash - self + 1) : 0, self);
	h->default_ops_library = hh->ops_library_path;
	hh->transfer_bytes_per_sec = config->transfer_bytes_per_sec;
	pthread_mutex_init(&hh->lock, NULL);
	fill_vtable(h);

	Dataflow_Status st = arena_init(&hh->arena, config->device_memory_bytes ? config->device_memory_bytes
									       : default_capacity());
	if (st != DATAFLOW_OK) {
		pthread_mutex_destroy(&hh->lock);
		free(hh);
		return st;
	}
	h->op_table = dataflow_op_table_create();
	h->num_threads = config->num_threads > 0 ? config->num_threads : online_cores();
	hh->pool = compute_pool_create(h->num_threads);
	int started = 0;
	if (h->op_table && hh->pool)
		for (; started < h->num_streams; started++)
			if (stream_start(&hh->streams[started], hh, started) != DATAFLOW_OK)
				break;
	if (started < h->num_streams) {
		h->num_streams = started;
		host_destroy(h);
		return dataflow_set_error(DATAFLOW_ERR_BACKEND,
					  "host backend: cannot create the op table, compute pool or stream workers");
	}
	*out = h;
	return DATAFLOW_OK;
}
