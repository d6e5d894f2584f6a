#ifndef DATAFLOW_CUDA_BACKEND_H
#define DATAFLOW_CUDA_BACKEND_H

/* Private to the CUDA backend: one handle = the primary context of one device, its streams
 * (each with a ring of events, the backend's events), raw device memory (cuMemAlloc, accounted
 * by the ledger in libdataflow), and native ops compiled with NVRTC at first use. */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cuda_driver.h"
#include "cuda_event_ring.h"
#include "cuda_fault.h"
#include "cuda_free_cache.h"
#include "dataflow/backend.h"

#define CUDA_ALIGN 256

typedef struct Cuda_Handle Cuda_Handle;

typedef struct {
	Cuda_Handle *handle;
	int id;
	CUstream stream;
	pthread_mutex_t lock; /* guards recorded, done, the ring and ops */
	uint64_t recorded;    /* events handed out; event v used events[v % CUDA_EVENT_RING] */
	uint64_t done;        /* the latest event known to be done */
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
	pthread_mutex_t lock; /* guards module: one compile per module, other modules not held up */
} Cuda_Module;

/* A native op's record. */
typedef struct {
	Cuda_Module *module;
	char kernel_name[160];     /* extern "C" __global__ name */
	CUfunction function;       /* resolved at first launch */
	Dataflow_Launch_Fn launch; /* required (grid, block, shared memory) */
} Cuda_Op;

struct Cuda_Handle {
	Dataflow_Handle *handle;
	const Cuda_Driver *cu;
	CUdevice device;
	CUcontext ctx;
	int cc_major, cc_minor;
	char device_name[128];
	int num_streams;
	Cuda_Stream streams[DATAFLOW_MAX_STREAMS];
	pthread_mutex_t lock; /* guards the module list and the lost message */
	Cuda_Module *modules;
	char ops_library_path[4096];
	pthread_mutex_t cache_lock; /* guards free_cache and held */
	Cuda_Free_Cache free_cache; /* released blocks kept for reuse (cuda_memory.c) */
	uint64_t held;              /* bytes from cuMemAlloc not yet given back: live and kept */
	uint64_t capacity;          /* the handle's: held never passes it */
	atomic_int lost;        /* set once a fault lost the context; lost_message then stays */
	char lost_message[1024];
};

/* The handle whose host op runs on this thread (a driver thread, where CUDA API calls are
 * forbidden), or NULL. */
extern _Thread_local Cuda_Handle *cuda_host_fn_handle;

static inline Cuda_Handle *cuda_of(Dataflow_Handle *h)
{
	return h->ctx;
}

/* Makes h's context current on this thread; `what` names the entry. Fails when called from a
 * host op (CUDA forbids API calls in host functions), and, naming the fault, once a fault lost
 * the context. */
Dataflow_Status cuda_enter(Cuda_Handle *h, const char *what);
/* cuda_check, and when the result is a fault that loses the context (cuda_error_is_sticky),
 * marks the handle lost with the message, which then tells the user to close the handle. */
Dataflow_Status cuda_check_fault(Cuda_Handle *h, CUresult result, const char *what);
/* Gives every kept block back to the driver (cuda_memory.c). */
void cuda_free_cache_flush(Cuda_Handle *h);
Dataflow_Status cuda_streams_create(Cuda_Handle *h, int num_streams, const int *priorities);
void cuda_streams_destroy(Cuda_Handle *h);
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

/* interface entries: cuda_register.c, cuda_submit.c, cuda_stream.c (with submit_host_op), cuda_memory.c,
 * cuda_transfer.c */
DATAFLOW_BACKEND_DECLARE_ENTRIES(cuda);
Dataflow_Status cuda_register_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags);
void cuda_unregister_host_mem(Dataflow_Handle *h, void *ptr);
Dataflow_Status cuda_enable_peer(Dataflow_Handle *h, Dataflow_Handle *peer);
void cuda_disable_peer(Dataflow_Handle *h, Dataflow_Handle *peer);

Dataflow_Status cuda_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *host_src,
					     uint64_t size);
Dataflow_Status cuda_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst, const void *dev_src,
					      uint64_t size);
Dataflow_Status cuda_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, Dataflow_Handle *dst_owner,
					  const void *dev_src, Dataflow_Handle *src_owner, uint64_t size);

#endif
