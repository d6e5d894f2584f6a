#ifndef DATAFLOW_CUDA_BACKEND_H
#define DATAFLOW_CUDA_BACKEND_H

/* Private to the CUDA backend: one handle = the primary context of one device, its streams
 * (each with a ring of events for stream states), accounted device memory, and native ops
 * compiled with NVRTC at first use. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "block_list.h"
#include "cuda_driver.h"
#include "cuda_fault.h"
#include "dataflow/backend.h"

#define CUDA_ALIGN 256
/* Stream states per stream whose events stay valid (see cuda_stream.c). */
#define CUDA_EVENT_RING 1024

typedef struct Cuda_Handle Cuda_Handle;

typedef struct {
	Cuda_Handle *handle;
	int id;
	CUstream stream;
	pthread_mutex_t lock; /* guards recorded, the ring and ops */
	uint64_t recorded;    /* states handed out; state v used events[v % CUDA_EVENT_RING] */
	Cuda_Op_Log ops;      /* submitted since the last successful sync: what a fault names */
	CUevent events[CUDA_EVENT_RING]; /* created on first use */
} Cuda_Stream;

/* A CUDA C++ translation unit; compiled and loaded when one of its kernels first runs. */
typedef struct Cuda_Module {
	struct Cuda_Module *next;
	char *name;        /* file path, or the embedded source's name */
	char *source;      /* text */
	char *include_dir; /* for #include "..." of a file; NULL for embedded sources */
	CUmodule module;   /* NULL until loaded */
} Cuda_Module;

typedef struct {
	Dataflow_Op_Record base;   /* first: skeleton, state, external (dataflow/backend.h) */
	Cuda_Module *module;       /* native */
	char kernel_name[160];     /* native: extern "C" __global__ name */
	CUfunction function;       /* native: resolved at first launch */
	Dataflow_Launch_Fn launch; /* native: required (grid, block, shared memory) */
} Cuda_Op;

struct Cuda_Handle {
	Dataflow_Handle base;
	const Cuda_Driver *cu;
	CUdevice device;
	CUcontext ctx;
	int cc_major, cc_minor;
	char device_name[128];
	Cuda_Stream streams[DATAFLOW_MAX_STREAMS];
	pthread_mutex_t lock; /* guards everything below */
	uint64_t capacity, in_use;
	Block_List live;        /* device allocations, offset = device address */
	Block_List host_ranges; /* host memory registered with enable_access_to_host_mem */
	Cuda_Handle *peers[DATAFLOW_MAX_STREAMS];
	int num_peers;
	Cuda_Module *modules;
	Dataflow_Libraries libraries; /* op code loaded by registration */
	char ops_library_path[4096];
	atomic_int lost;        /* set once a fault lost the context; lost_message then stays */
	char lost_message[1024];
};

extern const char cuda_backend_tag[];
/* Set while a host op runs (on a driver thread, where CUDA API calls are forbidden). */
extern _Thread_local int cuda_in_host_fn;

static inline Cuda_Handle *cuda_of(Dataflow_Handle *h)
{
	return (Cuda_Handle *)h;
}

/* Makes h's context current on this thread and checks stream_id; `what` names the entry.
 * Fails when called from a host op (CUDA forbids API calls in host functions). */
Dataflow_Status cuda_enter(Cuda_Handle *h, int stream_id, const char *what);
/* Like cuda_enter without a stream. Both fail, naming the fault, once the context is lost. */
Dataflow_Status cuda_enter_handle(Cuda_Handle *h, const char *what);
/* cuda_check, and when the result is a fault that loses the context (cuda_error_is_sticky),
 * marks the handle lost with the message, which then tells the user to close the handle. */
Dataflow_Status cuda_check_fault(Cuda_Handle *h, CUresult result, const char *what);
/* OK if [ptr, ptr + size) is device memory of h, of an enabled peer (allow_peer; *owner
 * says whose, may be NULL), or host memory registered with h. */
Dataflow_Status cuda_check_device_range(Cuda_Handle *h, const void *ptr, uint64_t size, int allow_peer,
					Cuda_Handle **owner, const char *what);
Dataflow_Status cuda_streams_create(Cuda_Handle *h, const int *priorities);
void cuda_streams_destroy(Cuda_Handle *h);
void cuda_memory_release_all(Cuda_Handle *h);
void cuda_modules_destroy(Cuda_Handle *h);
/* The module for (name, text): an existing one with the same text, or a new one (NULL when
 * out of memory). Takes ownership of text. Called with h->lock held. */
Cuda_Module *cuda_module_for(Cuda_Handle *h, const char *name, char *text, const char *include_dir);
/* Loads (compiling if needed) the module and resolves the op's kernel. */
Dataflow_Status cuda_op_function(Cuda_Handle *h, Cuda_Op *op);

/* dlopens lib<stem>.so* from the nvidia wheel directories, then the sonames (NULL-terminated)
 * through the loader (cuda_library.c); NULL with the places tried listed in tried. */
void *cuda_open_library(const char *stem, const char *const *sonames, char *tried, size_t tried_size);

/* NVRTC (nvrtc.c): compiles source for sm_<arch> into a cubin (*cubin malloc'ed), through
 * the on-disk cache. Includes resolve in include_dir (a file's directory) and the embedded
 * kernel headers. */
Dataflow_Status cuda_nvrtc_compile(const char *name, const char *source, const char *include_dir, int arch,
				   void **cubin, size_t *cubin_size);
/* Reads a .cu file (*text malloc'ed) and gives its directory (for its #includes). */
Dataflow_Status cuda_read_source(const char *path, char **text, char *dir, size_t dir_size);
/* The embedded default-op kernel sources (generated cuda_kernel_sources.c). */
typedef struct {
	const char *name, *text;
} Cuda_Source;
extern const Cuda_Source cuda_kernel_sources[];
extern const int cuda_num_kernel_sources;
const Cuda_Source *cuda_find_source(const char *name);

/* vtable entries, by file */
Dataflow_Status cuda_register_native_code(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					  int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					  const char *const *launch_symbols, const char *const *init_symbols,
					  int flags);
Dataflow_Status cuda_register_external_code(Dataflow_Handle *h, const char *library_path, int num_ops,
					    const Op_Skeleton *skeletons, const char *const *func_symbols,
					    const char *const *init_symbols, int flags);
Dataflow_Status cuda_register_external_func(Dataflow_Handle *h, const Op_Skeleton *skeleton,
					    Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags);
Dataflow_Status cuda_submit_op(Dataflow_Handle *h, const Op *op, int stream_id);
Dataflow_Status cuda_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id);

Dataflow_Status cuda_get_stream_state(Dataflow_Handle *h, int stream_id, Dataflow_Stream_State *state);
Dataflow_Status cuda_submit_dependency(Dataflow_Handle *h, int stream_id, const Dataflow_Stream_State *state);
Dataflow_Status cuda_sync_stream(Dataflow_Handle *h, int stream_id);
Dataflow_Status cuda_sync_handle(Dataflow_Handle *h);

Dataflow_Status cuda_alloc_mem(Dataflow_Handle *h, uint64_t size, void **ptr);
Dataflow_Status cuda_free_mem(Dataflow_Handle *h, void *ptr);
Dataflow_Status cuda_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size);
Dataflow_Status cuda_enable_access_to_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags);
Dataflow_Status cuda_disable_access_to_host_mem(Dataflow_Handle *h, void *ptr);
Dataflow_Status cuda_enable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer);
Dataflow_Status cuda_disable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer);
Dataflow_Status cuda_query_mem(Dataflow_Handle *h, uint64_t *capacity, uint64_t *in_use);
Dataflow_Status cuda_check_mem_range(Dataflow_Handle *h, const void *ptr, uint64_t size, const char *what);

Dataflow_Status cuda_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size);
Dataflow_Status cuda_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size);
Dataflow_Status cuda_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *dev_src,
					  uint64_t size);

#endif
