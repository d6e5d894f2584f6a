#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataflow/host_kernel.h"
#include "host.h"

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

int dataflow_host_compute_threads(Dataflow_Handle *handle)
{
	return host_of(handle)->num_threads;
}

void host_ref(Host_Handle *h)
{
	__atomic_fetch_add(&h->refs, 1, __ATOMIC_RELAXED);
}

void host_unref(Host_Handle *h)
{
	if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	for (int i = 0; i < h->num_streams; i++)
		stream_free(&h->streams[i]);
	free(h);
}

/* libdataflow has waited for the queued work, so the workers stop at once. */
static void host_destroy(Dataflow_Handle *h)
{
	Host_Handle *hh = host_of(h);
	for (int i = 0; i < hh->num_streams; i++)
		stream_stop(&hh->streams[i]);
	compute_pool_destroy(hh->pool);
	arena_destroy(&hh->arena);
	host_unref(hh);
}

static const Dataflow_Backend_Interface host_iface = {
	DATAFLOW_BACKEND_ENTRIES(host),
	/* host memory is reachable already, and every host handle's memory is this process's:
	 * registering host ranges and peers is the ledger's bookkeeping alone */
	.submit_inbound_transfer = host_submit_copy,
	.submit_outbound_transfer = host_submit_copy,
	.submit_peer_transfer = host_submit_peer_transfer,
};

/* Options: threads (compute threads: 1 up to 4x the online cores, at least 8, at most 1024)
 * and transfer_bytes_per_sec (emulated link bandwidth; 0 = unthrottled). */
static Dataflow_Status parse_options(const char *options, Host_Handle *hh)
{
	int cores = online_cores();
	double max_threads = 4.0 * cores < 8 ? 8 : 4.0 * cores > 1024 ? 1024 : 4.0 * cores;
	double threads = cores, bandwidth = 0;
	const Dataflow_Backend_Option known[] = {
		{"threads", 1, max_threads, 1, &threads},
		{"transfer_bytes_per_sec", 0, 1e18, 0, &bandwidth},
	};
	Dataflow_Status st = dataflow_backend_options_parse("host", options, known, 2);
	hh->num_threads = (int)threads;
	hh->transfer_bytes_per_sec = bandwidth;
	return st;
}

Dataflow_Status dataflow_host_backend_init(Dataflow_Handle *h, const Dataflow_Backend_Params *params,
					   uint64_t *capacity)
{
	if (params->device_index != 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "host backend: device index must be 0 (there is one host), got %d",
					  params->device_index);
	if (params->device_memory_bytes && params->device_memory_bytes < HOST_ARENA_ALIGN)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "host backend: device_memory_bytes must be 0 (default) or >= %d, got %llu",
					  HOST_ARENA_ALIGN, (unsigned long long)params->device_memory_bytes);
	Host_Handle *hh = calloc(1, sizeof(*hh));
	if (!hh)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "host backend: no memory for the handle");
	hh->handle = h;
	hh->refs = 1;
	Dataflow_Status st = parse_options(params->options, hh);
	if (st == DATAFLOW_OK)
		st = arena_init(&hh->arena, params->device_memory_bytes ? params->device_memory_bytes : default_capacity());
	if (st != DATAFLOW_OK) {
		free(hh);
		return st;
	}
	/* The kernels of the default ops sit next to this library. */
	Dl_info info;
	const char *self = dladdr((void *)&dataflow_host_backend_init, &info) && info.dli_fname ? info.dli_fname : "";
	const char *slash = strrchr(self, '/');
	snprintf(hh->ops_library_path, sizeof(hh->ops_library_path), "%.*slibdataflow_host_ops.so",
		 slash ? (int)(slash - self + 1) : 0, self);
	hh->pool = compute_pool_create(hh->num_threads);
	if (hh->pool)
		for (; hh->num_streams < params->num_streams; hh->num_streams++)
			if (stream_start(&hh->streams[hh->num_streams], hh, hh->num_streams) != DATAFLOW_OK)
				break;
	h->ctx = hh;
	if (hh->num_streams < params->num_streams) {
		host_destroy(h);
		h->ctx = NULL;
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "host backend: cannot create the compute pool or stream workers");
	}
	h->iface = &host_iface;
	h->default_ops_library = hh->ops_library_path;
	*capacity = hh->arena.capacity;
	return DATAFLOW_OK;
}
