#ifndef DATAFLOW_HANDLE_H
#define DATAFLOW_HANDLE_H

#include <stdint.h>

#include "dataflow/op.h"
#include "dataflow/op_table.h"
#include "dataflow/status.h"

/* Bumped whenever the layout or meaning of Dataflow_Handle changes; an out-of-tree backend
 * fills handle->version with the value it was built against. */
#define DATAFLOW_HANDLE_VERSION 1
#define DATAFLOW_MAX_STREAMS 64

typedef struct Dataflow_Handle Dataflow_Handle;

typedef struct {
	int num_streams;                 /* 0: 4 */
	const int *stream_priorities;    /* optional, num_streams entries; larger = more urgent */
	uint64_t device_memory_bytes;    /* capacity; 0: backend default */
	int num_threads;                 /* host compute threads; 0: all online cores */
	double transfer_bytes_per_sec;   /* host: emulate a link of this bandwidth; 0: unthrottled */
} Dataflow_Handle_Config;

/* A point in one stream's work, usable by this handle or another of the same backend:
 * submit_dependency makes a stream wait until the recorded work has finished. Plain value,
 * owned by the caller. */
typedef struct {
	const void *backend;  /* which backend made it */
	void *stream;         /* backend stream object */
	uint64_t value;       /* position in that stream */
} Dataflow_Stream_State;

/* Filled by an op's host-side launch function. CUDA reads grid/block/shared memory; the
 * host backend runs the kernel once per part, parts spread over its compute threads. */
typedef struct {
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared_mem_bytes;
	int num_parts;
} Dataflow_Launch_Config;

/* Per-op state made at registration (library handles, plans, caches); destroy may be NULL. */
typedef struct {
	void *data;
	void (*destroy)(void *data);
} Dataflow_Op_State;

typedef Dataflow_Status (*Dataflow_Op_Init_Fn)(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
					       Dataflow_Op_State *state);
/* Validates the op's arguments and chooses the launch configuration. */
typedef Dataflow_Status (*Dataflow_Launch_Fn)(Dataflow_Handle *handle, const Op *op, void *op_state,
					      Dataflow_Launch_Config *config);
/* An external op: runs in stream order on stream_id (host: on that stream's worker). */
typedef Dataflow_Status (*Dataflow_External_Fn)(Dataflow_Handle *handle, int stream_id, const Op *op,
						void *op_state);
/* A host-backend native kernel: one call per part, args as in Op.op_args. */
typedef void (*Dataflow_Host_Kernel)(void **args, int part, int num_parts);
typedef void (*Dataflow_Host_Fn)(void *arg);

enum { DATAFLOW_REGISTER_REPLACE = 1 };

/* The hardware abstraction: backend-supplied functions plus backend context, in four
 * groups (compute, dependencies, memory, transfers). Every entry returns a status and sets
 * dataflow_last_error() on failure. Work on one stream runs in submission order; nothing
 * but an explicit dependency orders work across streams. */
struct Dataflow_Handle {
	int version;
	const char *backend_name;
	int device_index;
	int num_streams;
	int num_threads; /* compute threads the backend uses on the host (host: its pool size) */
	void *ctx;
	Dataflow_Op_Table *op_table;
	/* Shared object holding this backend's default kernels, launch functions and external
	 * wrappers (libdataflowops registers from it). */
	const char *default_ops_library;

	/* compute */
	Dataflow_Status (*register_native_code)(Dataflow_Handle *handle, const char *code_path,
						const char *launch_library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *kernel_symbols,
						const char *const *launch_symbols, const char *const *init_symbols,
						int flags);
	Dataflow_Status (*register_external_code)(Dataflow_Handle *handle, const char *library_path, int num_ops,
						  const Op_Skeleton *skeletons, const char *const *func_symbols,
						  const char *const *init_symbols, int flags);
	/* Registers an in-process function; the handle takes ownership of state (may be NULL). */
	Dataflow_Status (*register_external_func)(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						  Dataflow_External_Fn func, const Dataflow_Op_State *state,
						  int flags);
	Dataflow_Status (*submit_op)(Dataflow_Handle *handle, const Op *op, int stream_id);
	Dataflow_Status (*submit_host_op)(Dataflow_Handle *handle, Dataflow_Host_Fn func, void *arg, int stream_id);

	/* dependencies */
	Dataflow_Status (*get_stream_state)(Dataflow_Handle *handle, int stream_id, Dataflow_Stream_State *state);
	Dataflow_Status (*submit_dependency)(Dataflow_Handle *handle, int stream_id,
					     const Dataflow_Stream_State *state);
	Dataflow_Status (*sync_stream)(Dataflow_Handle *handle, int stream_id);
	Dataflow_Status (*sync_handle)(Dataflow_Handle *handle);

	/* memory */
	Dataflow_Status (*alloc_mem)(Dataflow_Handle *handle, uint64_t size_bytes, void **ptr);
	/* Stream-ordered: the pointer is invalid at once; the memory is reused only after the work
	 * queued (on any stream) before the free has finished. Never blocks. */
	Dataflow_Status (*free_mem)(Dataflow_Handle *handle, void *ptr);
	Dataflow_Status (*set_mem)(Dataflow_Handle *handle, int stream_id, void *ptr, uint8_t value,
				   uint64_t size_bytes);
	Dataflow_Status (*enable_access_to_host_mem)(Dataflow_Handle *handle, void *host_ptr, uint64_t size_bytes,
						     unsigned int flags);
	Dataflow_Status (*disable_access_to_host_mem)(Dataflow_Handle *handle, void *host_ptr);
	Dataflow_Status (*enable_access_to_peer_mem)(Dataflow_Handle *handle, Dataflow_Handle *peer);
	Dataflow_Status (*disable_access_to_peer_mem)(Dataflow_Handle *handle, Dataflow_Handle *peer);
	Dataflow_Status (*query_mem)(Dataflow_Handle *handle, uint64_t *capacity_bytes, uint64_t *in_use_bytes);
	/* Checks that [ptr, ptr + size_bytes) lies inside one live allocation of this handle;
	 * `what` names the argument in the error message. */
	Dataflow_Status (*check_mem_range)(Dataflow_Handle *handle, const void *ptr, uint64_t size_bytes,
					   const char *what);

	/* transfers */
	Dataflow_Status (*submit_inbound_transfer)(Dataflow_Handle *handle, int stream_id, void *dev_dst,
						   const void *host_src, uint64_t size_bytes);
	Dataflow_Status (*submit_outbound_transfer)(Dataflow_Handle *handle, int stream_id, void *host_dst,
						    const void *dev_src, uint64_t size_bytes);
	Dataflow_Status (*submit_peer_transfer)(Dataflow_Handle *handle, int stream_id, void *dev_dst,
						const void *dev_src, uint64_t size_bytes);

	/* host-blocking waits so far (dataflow_sync_stream, dataflow_sync_handle) */
	uint64_t num_host_syncs;

	/* lifetime: waits for queued work, then releases everything */
	void (*destroy)(Dataflow_Handle *handle);
};

/* backend: "host", "cuda" or "cuda:N". The backend library (libdataflow_<name>.so, next to
 * libdataflow) is loaded on first use, so machines without a backend's runtime still work. */
Dataflow_Status dataflow_handle_create(const char *backend, const Dataflow_Handle_Config *config,
				       Dataflow_Handle **handle);
void dataflow_handle_destroy(Dataflow_Handle *handle);
/* Directory holding libdataflow and, next to it, the backend and op libraries. */
const char *dataflow_library_dir(void);

/* ---- the public entry points: every use of a handle goes through these ---- */

const char *dataflow_handle_backend_name(const Dataflow_Handle *handle);
int dataflow_handle_device_index(const Dataflow_Handle *handle);
int dataflow_handle_num_streams(const Dataflow_Handle *handle);
/* The shared object holding the backend's built-in kernels, launch functions and external-op
 * wrappers, from which an op library (libdataflowops) registers its ops; NULL if none. */
const char *dataflow_handle_default_ops_library(const Dataflow_Handle *handle);

/* compute */
Dataflow_Status dataflow_register_native_code(Dataflow_Handle *handle, const char *code_path,
					      const char *launch_library_path, int num_ops,
					      const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					      const char *const *launch_symbols, const char *const *init_symbols,
					      int flags);
Dataflow_Status dataflow_register_external_code(Dataflow_Handle *handle, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, int flags);
Dataflow_Status dataflow_register_external_func(Dataflow_Handle *handle, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags);
/* 1 if an op with this skeleton's fingerprint is registered on the handle, else 0. */
int dataflow_op_is_registered(Dataflow_Handle *handle, const Op_Skeleton *skeleton);
Dataflow_Status dataflow_submit_op(Dataflow_Handle *handle, const Op *op, int stream_id);
Dataflow_Status dataflow_submit_host_op(Dataflow_Handle *handle, Dataflow_Host_Fn func, void *arg, int stream_id);

/* dependencies */
Dataflow_Status dataflow_get_stream_state(Dataflow_Handle *handle, int stream_id, Dataflow_Stream_State *state);
Dataflow_Status dataflow_submit_dependency(Dataflow_Handle *handle, int stream_id,
					   const Dataflow_Stream_State *state);
Dataflow_Status dataflow_sync_stream(Dataflow_Handle *handle, int stream_id);
Dataflow_Status dataflow_sync_handle(Dataflow_Handle *handle);
/* How many times the host has blocked on this handle's work (sync_stream and sync_handle
 * calls) since it was created: lets tests and profiles count a training step's syncs. */
uint64_t dataflow_handle_host_syncs(const Dataflow_Handle *handle);

/* memory */
Dataflow_Status dataflow_alloc_mem(Dataflow_Handle *handle, uint64_t size_bytes, void **ptr);
Dataflow_Status dataflow_free_mem(Dataflow_Handle *handle, void *ptr);
Dataflow_Status dataflow_set_mem(Dataflow_Handle *handle, int stream_id, void *ptr, uint8_t value,
				 uint64_t size_bytes);
Dataflow_Status dataflow_enable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr, uint64_t size_bytes,
						   unsigned int flags);
Dataflow_Status dataflow_disable_access_to_host_mem(Dataflow_Handle *handle, void *host_ptr);
Dataflow_Status dataflow_enable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer);
Dataflow_Status dataflow_disable_access_to_peer_mem(Dataflow_Handle *handle, Dataflow_Handle *peer);
Dataflow_Status dataflow_query_mem(Dataflow_Handle *handle, uint64_t *capacity_bytes, uint64_t *in_use_bytes);
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
