#ifndef DATAFLOW_BACKEND_H
#define DATAFLOW_BACKEND_H

/* Helpers for backend authors: the parts of a Dataflow_Handle implementation that do not
 * depend on the hardware. Not part of the user API (not in dataflow.h, not in the Python
 * bindings); include it from a backend's sources.
 *
 * Registration with these helpers goes:
 *
 *     Dataflow_Op_Batch b;
 *     Dataflow_Status st = dataflow_op_batch_begin(&b, h, num_ops, skeletons, symbols, flags,
 *                                                  sizeof(My_Op));
 *     if (st != DATAFLOW_OK)
 *         return st;
 *     void *lib;
 *     st = dataflow_libraries_open(&my->libraries, path, &lib);
 *     for (int i = 0; i < num_ops && st == DATAFLOW_OK; i++) {
 *         My_Op *op = b.records[i];
 *         ...  dataflow_find_symbol(lib, path, symbols, i, "kernel", "", &sym) ...
 *         b.inits[i] = ...;
 *     }
 *     return dataflow_op_batch_finish(&b, st);
 *
 * so a failed call registers nothing and leaves the op table as it was. */

#include <stddef.h>

#include "dataflow/handle.h"

/* ---- argument checks with the standard messages ---- */

/* OK if 0 <= stream_id < h->num_streams, else DATAFLOW_ERR_INVALID_ARGUMENT with
 * "<what>: stream id must be in [0, N) for this handle, got <id>". */
Dataflow_Status dataflow_check_stream_id(const Dataflow_Handle *h, int stream_id, const char *what);
/* OK if size > 0, else DATAFLOW_ERR_INVALID_ARGUMENT with "<what>: size_bytes must be > 0, got 0". */
Dataflow_Status dataflow_check_size_bytes(const char *what, uint64_t size);

/* ---- shared objects loaded for registered ops ---- */

/* The shared objects a handle has loaded; they stay open until dataflow_libraries_close
 * (op records point into them). A zero-initialized value is an empty set. Opening is
 * thread-safe (one lock inside libdataflow guards every set). */
typedef struct {
	void **handles;
	int count;
} Dataflow_Libraries;

/* dlopens path (RTLD_NOW | RTLD_LOCAL) and remembers it in libs. Errors: "register: library
 * path is NULL", "register: cannot load <path>: <dlerror>", "register: no memory". */
Dataflow_Status dataflow_libraries_open(Dataflow_Libraries *libs, const char *path, void **lib);
/* dlcloses every library of libs and empties it. Call after the op records are gone. */
void dataflow_libraries_close(Dataflow_Libraries *libs);

/* Resolves symbols[i] in lib (loaded from path, named in errors); *out is NULL when the symbol
 * is absent and optional. symbols may be NULL, and an entry NULL or "", meaning "absent".
 * required: NULL if the symbol is optional; else it is required and the string is appended
 * to the error "register: <kind> symbol of op <i> is missing" ("" for nothing, or a reason
 * such as " (required on cuda)"). A name not found: DATAFLOW_ERR_LOAD_FAILED with
 * "register: <kind> symbol '<name>' not found in <path>". */
Dataflow_Status dataflow_find_symbol(void *lib, const char *path, const char *const *symbols, int i,
				     const char *kind, const char *required, void **out);

/* ---- op records and all-or-nothing registration ---- */

/* The head of every backend op record: a backend's record type starts with this member, so
 * that the helpers below can fill, initialize and destroy records of any backend. */
typedef struct {
	Op_Skeleton skeleton;
	Dataflow_Op_State state;       /* filled by the op's init, or given by register_external_func */
	Dataflow_External_Fn external; /* external ops; NULL for native ones */
} Dataflow_Op_Record;

/* Runs record->state.destroy (if set) and frees the record; NULL is ignored. The value
 * destructor to pass to dataflow_op_table_destroy. */
void dataflow_op_record_destroy(void *record);

/* One registration call: num_ops zeroed records (each record_size bytes, starting with a
 * Dataflow_Op_Record) and an init function per op (NULL: none), filled by the backend. */
typedef struct {
	Dataflow_Handle *handle;
	int num_ops;
	const Op_Skeleton *skeletons;
	int replace;
	void **records;
	Dataflow_Op_Init_Fn *inits;
} Dataflow_Op_Batch;

/* Checks the call with dataflow_op_table_check_batch (symbols: the array that must be
 * non-NULL), then allocates the batch ("register: no memory" if it cannot). On failure
 * there is nothing to finish. flags: DATAFLOW_REGISTER_*. */
Dataflow_Status dataflow_op_batch_begin(Dataflow_Op_Batch *batch, Dataflow_Handle *h, int num_ops,
					const Op_Skeleton *skeletons, const void *symbols, int flags,
					size_t record_size);
/* Ends the call and frees the batch. st != OK (the backend failed to fill it): destroys every
 * record and returns st, its error message kept. Else sets each record's skeleton, runs the
 * inits in order (the first failure destroys every record and fails with "register: init of op
 * '<nickname>' failed: <its message>"), then inserts every record into the op table; on
 * replace it first waits for queued work (handle->sync_handle) and destroys the records it
 * replaces. */
Dataflow_Status dataflow_op_batch_finish(Dataflow_Op_Batch *batch, Dataflow_Status st);

/* submit_op's checks after the stream's: op non-NULL ("submit_op: op is NULL"), its
 * fingerprint registered (dataflow_op_table_unknown_error), then dataflow_op_check against the
 * registered skeleton with check_tensor and ctx. On success *record is the op's record. */
Dataflow_Status dataflow_op_find_checked(Dataflow_Handle *h, const Op *op,
					 Dataflow_Status (*check_tensor)(void *ctx, const void *ptr, const char *what),
					 void *ctx, void **record);

/* ---- external ops: the same on every backend ---- */

/* register_external_code over the helpers above: loads library_path into libs, resolves each
 * func (required; a missing one's error ends with `required`, as in dataflow_find_symbol) and
 * optional init, and installs records of record_size bytes with only the Dataflow_Op_Record
 * head set. A backend's vtable entry passes its library set, record size and note. */
Dataflow_Status dataflow_backend_register_external_code(Dataflow_Handle *h, Dataflow_Libraries *libs, size_t record_size,
						const char *required, const char *library_path, int num_ops,
						const Op_Skeleton *skeletons, const char *const *func_symbols,
						const char *const *init_symbols, int flags);
/* register_external_func likewise: one record of record_size bytes with func and a copy of
 * *state (may be NULL). */
Dataflow_Status dataflow_backend_register_external_func(Dataflow_Handle *h, size_t record_size, const Op_Skeleton *skeleton,
						Dataflow_External_Fn func, const Dataflow_Op_State *state, int flags);

#endif
