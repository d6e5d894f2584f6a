#ifndef DATAFLOW_BACKEND_H
#define DATAFLOW_BACKEND_H

/* For backend authors (installed for out-of-tree backends; not in dataflow.h, not in the
 * Python bindings): the handle libdataflow owns and the interface a backend implements, an
 * interface struct plus opaque context as ggml keeps ggml_backend_i.
 *
 * libdataflow_<name>.so exports dataflow_<name>_backend_init (Dataflow_Backend_Init_Fn), which
 * fills the handle's iface and ctx. Every public dataflow_* call validates its arguments once
 * (the handle is open, stream ids, registered ops and their arguments against their signatures,
 * pointers against the memory ledger, sizes) and then calls the interface, so an entry receives
 * only arguments that passed those checks and repeats none of them. The memory ledger
 * (capacity, accounting, stream-ordered frees, host ranges, peer links) is libdataflow's: a
 * backend provides raw allocation and release, and events the ledger orders frees with. */

#include <stddef.h>
#include <stdint.h>

#include "dataflow/handle.h"
#include "dataflow/op_impl.h"
#include "dataflow/op_signature.h"

/* Bumped whenever the handle struct or the interface changes; a backend states the version it
 * was built against in iface->version and libdataflow refuses another. */
#define DATAFLOW_BACKEND_INTERFACE_VERSION 2

typedef struct Dataflow_Backend_Interface Dataflow_Backend_Interface;
typedef struct Dataflow_Op_Table Dataflow_Op_Table;
typedef struct Dataflow_Ledger Dataflow_Ledger;

/* The shared objects a handle has loaded for its ops; closed after the ops are gone. */
typedef struct {
	void **handles;
	int count;
} Dataflow_Libraries;

/* One registered op: what the op table maps its fingerprint to. */
typedef struct {
	Op_Skeleton skeleton;
	void *record;                  /* native ops: the backend's, from load_native_code */
	Dataflow_External_Fn external; /* external ops; NULL for native ones */
	Dataflow_Op_State state;       /* made by the op's init, or given to register_external_func */
	/* compiled at registration (NULL: registered without one); every submission passed it */
	Dataflow_Op_Signature *signature;
} Dataflow_Op_Entry;

struct Dataflow_Handle {
	/* set by libdataflow before the backend's init; the backend may read them */
	uint64_t id; /* never reused in the process; names the handle in stream states */
	const char *backend_name;
	int device_index;
	int num_streams;
	/* set by the backend's init */
	const Dataflow_Backend_Interface *iface;
	void *ctx;
	const char *default_ops_library; /* may stay NULL */
	/* libdataflow's alone */
	Dataflow_Op_Table *op_table;
	Dataflow_Ledger *ledger;
	Dataflow_Libraries libraries;
	int state;        /* open, closing */
	int active_calls; /* public calls running on the handle */
	int pins;         /* other handles' closes waiting on this one's streams */
	uint64_t num_host_syncs;
};

/* Events: a backend's positions in a stream's work, as uint64 values that grow with each
 * record on that stream. An event is done once the work queued on its stream before it has
 * finished; a later event of the stream being done implies the earlier ones are. */
struct Dataflow_Backend_Interface {
	/* DATAFLOW_BACKEND_INTERFACE_VERSION. version and destroy stay the first two fields in
	 * every version, so that a backend built for another one can still be released. */
	int version;

	/* ---- lifetime ----
	 * destroy: releases the context, once libdataflow has waited for the queued work,
	 * destroyed the op entries and released all memory. on_worker: 1 if the calling thread is
	 * running work queued on the handle (a host op, an external op), which must not block on
	 * the handle's streams. */
	void (*destroy)(Dataflow_Handle *h);
	int (*on_worker)(Dataflow_Handle *h);

	/* ---- compute ----
	 * load_native_code: loads the code of num_ops ops (the batch is checked: valid skeletons,
	 * kernel_symbols non-NULL) and fills records[i] (its per-op record, one malloc'ed block that
	 * libdataflow frees when the op goes; what it points to stays the backend's; entries may be
	 * left NULL on failure) and inits[i] (the op's init, NULL if none). Libraries go in
	 * h->libraries (dataflow_libraries_open).
	 * submit_op: entry is the op's registered entry (native: entry->record; external:
	 * entry->external), state entry->state.data. */
	Dataflow_Status (*load_native_code)(Dataflow_Handle *h, const char *code_path, const char *launch_library_path,
					    int num_ops, const Op_Skeleton *skeletons, const char *const *kernel_symbols,
					    const char *const *launch_symbols, const char *const *init_symbols,
					    void **records, Dataflow_Op_Init_Fn *inits);
	Dataflow_Status (*submit_op)(Dataflow_Handle *h, int stream_id, const Op *op, const Dataflow_Op_Entry *entry);
	Dataflow_Status (*submit_host_op)(Dataflow_Handle *h, int stream_id, Dataflow_Host_Fn func, void *arg);

	/* ---- dependencies ----
	 * record_event: the event at the end of the stream's queued work. query_event: 1 if done,
	 * 0 if not or if it cannot tell now; never blocks. wait_event: blocks the calling thread
	 * until done (never called from the handle's own workers). submit_dependency: the stream
	 * waits for another stream's event, of h or of another handle of this backend (other stays
	 * valid for the call; the backend keeps whatever the queued wait needs). sync_stream:
	 * blocks until the stream's work is done and reports, clearing it, its first
	 * asynchronous failure. */
	Dataflow_Status (*record_event)(Dataflow_Handle *h, int stream_id, uint64_t *event);
	int (*query_event)(Dataflow_Handle *h, int stream_id, uint64_t event);
	Dataflow_Status (*wait_event)(Dataflow_Handle *h, int stream_id, uint64_t event);
	Dataflow_Status (*submit_dependency)(Dataflow_Handle *h, int stream_id, Dataflow_Handle *other,
					     int other_stream_id, uint64_t event);
	Dataflow_Status (*sync_stream)(Dataflow_Handle *h, int stream_id);

	/* ---- memory ----
	 * mem_alloc: raw device memory of size_bytes (a multiple of 256), 256-byte aligned; the
	 * ledger has already accounted it against the capacity. mem_release: gives it back, called
	 * by the ledger only once no queued work can use it. The host-memory and peer entries may
	 * be NULL (nothing to do on this backend). */
	Dataflow_Status (*mem_alloc)(Dataflow_Handle *h, uint64_t size_bytes, void **ptr);
	void (*mem_release)(Dataflow_Handle *h, void *ptr, uint64_t size_bytes);
	Dataflow_Status (*set_mem)(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size_bytes);
	Dataflow_Status (*register_host_mem)(Dataflow_Handle *h, void *ptr, uint64_t size_bytes, unsigned int flags);
	void (*unregister_host_mem)(Dataflow_Handle *h, void *ptr);
	Dataflow_Status (*enable_peer)(Dataflow_Handle *h, Dataflow_Handle *peer);
	void (*disable_peer)(Dataflow_Handle *h, Dataflow_Handle *peer);

	/* ---- transfers ----
	 * Peer transfers name the handle whose memory each side is (h itself or an enabled peer). */
	Dataflow_Status (*submit_inbound_transfer)(Dataflow_Handle *h, int stream_id, void *dev_dst,
						   const void *host_src, uint64_t size_bytes);
	Dataflow_Status (*submit_outbound_transfer)(Dataflow_Handle *h, int stream_id, void *host_dst,
						    const void *dev_src, uint64_t size_bytes);
	Dataflow_Status (*submit_peer_transfer)(Dataflow_Handle *h, int stream_id, void *dev_dst,
						Dataflow_Handle *dst_owner, const void *dev_src,
						Dataflow_Handle *src_owner, uint64_t size_bytes);
};

/* What the backend's init is given (num_streams already defaulted and in range). */
typedef struct {
	int device_index;
	int num_streams;
	const int *stream_priorities;
	uint64_t device_memory_bytes; /* requested capacity; 0: the backend's default */
	const char *options;          /* the config's, for dataflow_backend_options_parse */
} Dataflow_Backend_Params;

/* dataflow_<name>_backend_init: fills handle->iface, ->ctx and (optionally)
 * ->default_ops_library, and *capacity_bytes: the device memory the ledger lets the handle use
 * (the request, or the default for 0; an error where the backend cannot provide it). On failure
 * it releases what it made and leaves handle->iface NULL. */
typedef Dataflow_Status (*Dataflow_Backend_Init_Fn)(Dataflow_Handle *handle, const Dataflow_Backend_Params *params,
						    uint64_t *capacity_bytes);

/* ---- helpers for backends ---- */

/* A backend names its entries <prefix>_<entry>. The entries every in-tree backend defines
 * (compute, dependencies, device memory), declared once for its headers and listed once for its
 * interface: static const Dataflow_Backend_Interface iface = {DATAFLOW_BACKEND_ENTRIES(host), ...};
 * (<prefix>_destroy and <prefix>_on_worker too; the host-memory, peer and transfer entries
 * differ between backends and are named there). */
#define DATAFLOW_BACKEND_DECLARE_ENTRIES(prefix)                                                                       \
	Dataflow_Status prefix##_load_native_code(                                                                     \
		Dataflow_Handle *h, const char *code_path, const char *launch_library_path, int num_ops,               \
		const Op_Skeleton *skeletons, const char *const *kernel_symbols, const char *const *launch_symbols,    \
		const char *const *init_symbols, void **records, Dataflow_Op_Init_Fn *inits);                          \
	Dataflow_Status prefix##_submit_op(Dataflow_Handle *h, int stream_id, const Op *op,                            \
					   const Dataflow_Op_Entry *entry);                                            \
	Dataflow_Status prefix##_submit_host_op(Dataflow_Handle *h, int stream_id, Dataflow_Host_Fn func, void *arg); \
	Dataflow_Status prefix##_record_event(Dataflow_Handle *h, int stream_id, uint64_t *event);                     \
	int prefix##_query_event(Dataflow_Handle *h, int stream_id, uint64_t event);                                  \
	Dataflow_Status prefix##_wait_event(Dataflow_Handle *h, int stream_id, uint64_t event);                        \
	Dataflow_Status prefix##_submit_dependency(Dataflow_Handle *h, int stream_id, Dataflow_Handle *other,          \
						   int other_stream_id, uint64_t event);                               \
	Dataflow_Status prefix##_sync_stream(Dataflow_Handle *h, int stream_id);                                       \
	Dataflow_Status prefix##_mem_alloc(Dataflow_Handle *h, uint64_t size_bytes, void **ptr);                       \
	void prefix##_mem_release(Dataflow_Handle *h, void *ptr, uint64_t size_bytes);                                 \
	Dataflow_Status prefix##_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size_bytes)

#define DATAFLOW_BACKEND_ENTRIES(prefix)                                                                               \
	.version = DATAFLOW_BACKEND_INTERFACE_VERSION, .destroy = prefix##_destroy, .on_worker = prefix##_on_worker,  \
	.load_native_code = prefix##_load_native_code, .submit_op = prefix##_submit_op,                               \
	.submit_host_op = prefix##_submit_host_op, .record_event = prefix##_record_event,                             \
	.query_event = prefix##_query_event, .wait_event = prefix##_wait_event,                                       \
	.submit_dependency = prefix##_submit_dependency, .sync_stream = prefix##_sync_stream,                         \
	.mem_alloc = prefix##_mem_alloc, .mem_release = prefix##_mem_release, .set_mem = prefix##_set_mem


/* One option a backend accepts: its key, accepted range and where the value goes (holding the
 * default on entry). */
typedef struct {
	const char *key;
	double min, max;
	int integer; /* the value must be a whole number */
	double *value;
} Dataflow_Backend_Option;

/* Parses options ("key=value" pairs separated by commas; NULL or "" is none) against the
 * backend's known options. An unknown or repeated key, a value that is not a number, out of
 * range, or fractional for an integer option fails with DATAFLOW_ERR_INVALID_ARGUMENT naming the
 * backend, the key and (for an unknown key) the known ones; nothing is set then. */
Dataflow_Status dataflow_backend_options_parse(const char *backend, const char *options,
					       const Dataflow_Backend_Option *known, int num_known);

/* dlopens path (RTLD_NOW | RTLD_LOCAL) into h->libraries, closed when the handle is destroyed.
 * Errors: "register: library path is NULL", "register: cannot load <path>: <dlerror>". */
Dataflow_Status dataflow_libraries_open(Dataflow_Handle *h, const char *path, void **lib);

/* Resolves symbols[i] in lib (loaded from path, named in errors); *out is NULL when the symbol
 * is absent and optional. symbols may be NULL, and an entry NULL or "", meaning "absent".
 * required: NULL if the symbol is optional; else it is required and the string is appended
 * to the error "register: <kind> symbol of op <i> is missing" ("" for nothing, or a reason
 * such as " (required on cuda)"). A name not found: DATAFLOW_ERR_LOAD_FAILED with
 * "register: <kind> symbol '<name>' not found in <path>". */
Dataflow_Status dataflow_find_symbol(void *lib, const char *path, const char *const *symbols, int i,
				     const char *kind, const char *required, void **out);

#endif
