#ifndef DATAFLOW_HANDLE_H
#define DATAFLOW_HANDLE_H

#include <stdint.h>

#include "dataflow/op.h"
#include "dataflow/status.h"

/* A handle is one device of one backend ("host", "cuda:1") with its streams, its device
 * memory and its registered ops. It is opaque: every use goes through the dataflow_*
 * functions below, which check their arguments once and then call the backend (the backend
 * interface is dataflow/backend.h, for backend authors).
 *
 * Threads: every function may be called from several threads at once on one handle
 * (submissions to one stream from two threads are ordered as the calls happen to run).
 * dataflow_handle_destroy must be the last call: other threads' calls that are still running
 * when it starts finish first, calls that start after it fail with "handle is closed" until it
 * returns, and the handle pointer is invalid once it has returned. */

#define DATAFLOW_MAX_STREAMS 64

typedef struct Dataflow_Handle Dataflow_Handle;

typedef struct {
	int num_streams;              /* 0: 4 */
	const int *stream_priorities; /* optional, num_streams entries; larger = more urgent */
	uint64_t device_memory_bytes; /* capacity; 0: backend default */
	/* Backend options, "key=value" pairs separated by commas, e.g. "threads=2,
	 * transfer_bytes_per_sec=1e9"; NULL or "": the backend's defaults. The backend rejects a
	 * key it does not know, naming the ones it does. host: threads (compute threads, default
	 * all online cores), transfer_bytes_per_sec (emulate a link of that bandwidth on transfers,
	 * default 0 = unthrottled). cuda: none yet. */
	const char *options;
} Dataflow_Handle_Config;

/* A point in one stream's work (an event), usable by this handle or another handle of the same
 * backend: submit_dependency makes a stream wait until the recorded work has finished. A plain
 * value owned by the caller; it names its handle by an id that is never reused, so waiting on
 * an event of a handle that has been destroyed fails clearly. */
typedef struct {
	uint64_t handle_id; /* 0: never recorded */
	int stream_id;
	uint64_t value; /* the backend's position in that stream */
} Dataflow_Stream_State;

/* Device memory accounting (dataflow_memory_info). Sizes count whole 256-byte units, as
 * allocations are rounded; freed memory counts until the work queued before the free is done. */
typedef struct {
	uint64_t capacity_bytes;
	uint64_t in_use_bytes;
	uint64_t peak_bytes; /* highest in_use since creation or dataflow_reset_memory_peak */
} Dataflow_Memory_Info;

/* Per-op state made at registration (library handles, plans, caches); destroy may be NULL. */
typedef struct {
	void *data;
	void (*destroy)(void *data);
} Dataflow_Op_State;

/* An external op: runs in stream order on stream_id (host: on that stream's worker). */
typedef Dataflow_Status (*Dataflow_External_Fn)(Dataflow_Handle *handle, int stream_id, const Op *op,
						void *op_state);
typedef void (*Dataflow_Host_Fn)(void *arg);

enum { DATAFLOW_REGISTER_REPLACE = 1 };

/* backend: "host", "cuda" or "cuda:N". The backend library (libdataflow_<name>.so, next to
 * libdataflow) is loaded on first use, so machines without a backend's runtime still work. */
Dataflow_Status dataflow_handle_create(const char *backend, const Dataflow_Handle_Config *config,
				       Dataflow_Handle **handle);
/* Waits for the queued work, then releases the device, its memory and its ops. NULL: OK.
 * Refused (the handle stays open) when called from work queued on the handle itself (a host op
 * or an external op, which the destroy would wait for) or from inside another call on it (an
 * op's launch or init function). */
Dataflow_Status dataflow_handle_destroy(Dataflow_Handle *handle);
/* Directory holding libdataflow and, next to it, the backend and op libraries. */
const char *dataflow_library_dir(void);

/* ---- the public entry points: every use of a handle goes through these ---- */

const char *dataflow_handle_backend_name(const Dataflow_Handle *handle);
int dataflow_handle_device_index(const Dataflow_Handle *handle);
int dataflow_handle_num_streams(const Dataflow_Handle *handle);
/* The shared object holding the backend's built-in kernels, launch functions and external-op
 * wrappers, from which an op library (libdataflowops) registers its ops; NULL if none. */
const char *dataflow_handle_default_ops_library(const Dataflow_Handle *handle);

/* compute
 *
 * Registration: each op may come with a signature (dataflow/op_signature.h: roles, extents,
 * nullability and aliasing of its tensors, requirements on its scalars), compiled here once;
 * signatures has one entry per op (an entry, or the whole array, NULL: that op has none). A
 * signature that does not compile fails the whole call, naming the op, and registers nothing.
 * flags: DATAFLOW_REGISTER_REPLACE to replace ops already registered. */
Dataflow_Status dataflow_register_native_code(Dataflow_Handle *handle, const char *code_path,
					      const char *launch_library_path, int num_ops,
					      const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					      const char *const *launch_symbols, const char *const *init_symbols,
					      const char *const *signatures, int flags);
Dataflow_Status dataflow_register_external_code(Dataflow_Handle *handle, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, const char *const *signatures,
						int flags);
/* Registers an in-process function; the handle takes ownership of state (may be NULL). */
Dataflow_Status dataflow_register_external_func(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state,
						const char *signature, int flags);
/* 1 if an op with this skeleton's fingerprint is registered on the handle, else 0. */
int dataflow_op_is_registered(Dataflow_Handle *handle, const Op_Skeleton *skeleton);
/* The checks dataflow_submit_op makes, without submitting: the op is registered, its skeleton
 * is the registered one, every op_args entry is non-NULL, and its arguments satisfy the op's
 * signature (with the handle's memory as the range check), or, for an op registered without
 * one, every non-NULL tensor lies in memory of the handle. Lets a caller submit several ops
 * all or none. */
Dataflow_Status dataflow_op_check(Dataflow_Handle *handle, const Op *op);
Dataflow_Status dataflow_submit_op(Dataflow_Handle *handle, const Op *op, int stream_id);
Dataflow_Status dataflow_submit_host_op(Dataflow_Handle *handle, Dataflow_Host_Fn func, void *arg, int stream_id);

/* dependencies */
Dataflow_Status dataflow_get_stream_state(Dataflow_Handle *handle, int stream_id, Dataflow_Stream_State *state);
Dataflow_Status dataflow_submit_dependency(Dataflow_Handle *handle, int stream_id,
					   const Dataflow_Stream_State *state);
/* Block until the stream's (every stream's) queued work is done; report, and clear, the first
 * failure of asynchronous work on it (an external op that failed). */
Dataflow_Status dataflow_sync_stream(Dataflow_Handle *handle, int stream_id);
Dataflow_Status dataflow_sync_handle(Dataflow_Handle *handle);
/* How many times the host has blocked on this handle's work (sync_stream and sync_handle
 * calls) since it was created: lets tests and profiles count a training step's syncs. */
uint64_t dataflow_handle_host_syncs(const Dataflow_Handle *handle);

/* memory: allocations are 256-byte aligned; an allocation past the capacity waits for the memory
 * freed by queued work, then fails with DATAFLOW_ERR_OUT_OF_MEMORY naming the sizes. */
Dataflow_Status dataflow_alloc_mem(Dataflow_Handle *handle, uint64_t size_bytes, void **ptr);
/* Stream-ordered and never blocks: the pointer is invalid at once (ops and transfers reject it);
 * the memory is reused only after the work queued before the free, on every stream, is done. */
Dataflow_Status dataflow_free_mem(Dataflow_Handle *handle, void *ptr);
Dataflow_Status dataflow_set_mem(Dataflow_Handle *handle, int stream_id, void *ptr, uint8_t value,
				 uint64_t size_bytes);
/* Host memory the handle's ops and transfers may use (page-locked on cuda; flags go to the
 * backend, cuda: cuMemHostRegister's). */
Dataflow_Status dataflow_enable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr, uint64_t size_bytes,
						   unsigned int flags);
Dataflow_Status dataflow_disable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr);
/* Lets the handle's ops and peer transfers use the peer's device memory (same backend). The
 * link goes when either handle is destroyed; destroying the peer first waits for the work this
 * handle queued before. */
Dataflow_Status dataflow_enable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer);
Dataflow_Status dataflow_disable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer);
Dataflow_Status dataflow_memory_info(Dataflow_Handle *handle, Dataflow_Memory_Info *info);
/* Restarts the peak at the bytes in use now. */
Dataflow_Status dataflow_reset_memory_peak(Dataflow_Handle *handle);
/* OK if [ptr, ptr + size_bytes) lies inside one live allocation of this handle (or host memory
 * made accessible to it); `what` names the argument in the error message. */
Dataflow_Status dataflow_check_mem_range(Dataflow_Handle *handle, const void *ptr, uint64_t size_bytes,
					 const char *what);

/* transfers */
Dataflow_Status dataflow_submit_inbound_transfer(Dataflow_Handle *handle, int stream_id, void *dev_dst,
						 const void *host_src, uint64_t size_bytes);
Dataflow_Status dataflow_submit_outbound_transfer(Dataflow_Handle *handle, int stream_id, void *host_dst,
						  const void *dev_src, uint64_t size_bytes);
Dataflow_Status dataflow_submit_peer_transfer(Dataflow_Handle *handle, int stream_id, void *dev_dst,
					      const void *dev_src, uint64_t size_bytes);

#endif
