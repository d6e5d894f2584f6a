#ifndef DATAFLOW_HANDLE_INTERNAL_H
#define DATAFLOW_HANDLE_INTERNAL_H

/* Private to libdataflow: the handle's lifetime (handle.c), the registry of open handles that
 * stream states and peer links name, the memory ledger (ledger.c) and the op entries
 * (register.c), shared by the public entry points (dispatch.c). */

#include <stdint.h>

#include "dataflow/backend.h"
#include "op_table.h"

#define DATAFLOW_INTERNAL __attribute__((visibility("hidden")))

enum { HANDLE_OPEN = 1, HANDLE_CLOSING = 2 };

/* ---- lifetime (handle.c) ---- */

/* Every public call on a handle runs between handle_enter and handle_leave: the handle is
 * checked (NULL, not an open handle, closing) and counted as in use, so that destroy waits for
 * calls already running and new ones fail. The pointer is looked up in the registry before it is
 * read: a destroyed handle's memory is never touched to find out. */
DATAFLOW_INTERNAL Dataflow_Status handle_enter(Dataflow_Handle *h, const char *what);

/* Ends a call that handle_enter began; returns st. */
static inline Dataflow_Status handle_leave(Dataflow_Handle *h, Dataflow_Status st)
{
	__atomic_fetch_sub(&h->active_calls, 1, __ATOMIC_RELEASE);
	return st;
}

/* Op code (a launch, init or external function) runs inside a call on its handle: between
 * op_code_begin and op_code_end this thread is marked as inside h, so that a destroy or an op
 * replacement from that code, which would wait for the call it runs in, is refused instead. */
DATAFLOW_INTERNAL void op_code_begin(Dataflow_Handle *h);
DATAFLOW_INTERNAL void op_code_end(void);
/* 1 if this thread runs op code of a call on h. */
DATAFLOW_INTERNAL int in_op_code(const Dataflow_Handle *h);

/* handle_enter that returns from the calling function when it fails. */
#define HANDLE_ENTER(h, what)                                                                            \
	do {                                                                                             \
		Dataflow_Status enter_st_ = handle_enter(h, what);                                       \
		if (enter_st_ != DATAFLOW_OK)                                                            \
			return enter_st_;                                                                \
	} while (0)

/* The registry of open handles: stream states name their handle by id, and a handle's close
 * unlinks it from its peers, under one recursive lock. */
DATAFLOW_INTERNAL void registry_lock(void);
DATAFLOW_INTERNAL void registry_unlock(void);
/* The open handle with this id, or NULL; call with the registry locked. */
DATAFLOW_INTERNAL Dataflow_Handle *registry_find(uint64_t id);
/* Whether h (compared by address, not read) is a registered handle; call with the registry locked. */
DATAFLOW_INTERNAL int registry_has(const Dataflow_Handle *h);

/* Waits, without consuming their asynchronous errors, for the work queued so far on every
 * stream of h (events recorded now, then waited for). */
DATAFLOW_INTERNAL void handle_wait_idle(Dataflow_Handle *h);

/* ---- the memory ledger (ledger.c); every function takes the ledger's lock ---- */

#define LEDGER_ALIGN 256
#define LEDGER_MAX_PEERS 64

DATAFLOW_INTERNAL Dataflow_Status ledger_create(Dataflow_Handle *h, uint64_t capacity);
/* Releases every allocation (the streams are idle), host range and peer link of h. */
DATAFLOW_INTERNAL void ledger_destroy(Dataflow_Handle *h);
DATAFLOW_INTERNAL Dataflow_Status ledger_alloc(Dataflow_Handle *h, uint64_t size, void **ptr);
DATAFLOW_INTERNAL Dataflow_Status ledger_free(Dataflow_Handle *h, void *ptr);
DATAFLOW_INTERNAL void ledger_info(Dataflow_Handle *h, Dataflow_Memory_Info *info);
DATAFLOW_INTERNAL void ledger_reset_peak(Dataflow_Handle *h);
/* 1 if [ptr, ptr + size) lies inside one live allocation of h or one host range registered with
 * it; else 0 with the reason (naming ptr) in why. */
DATAFLOW_INTERNAL int ledger_contains(Dataflow_Handle *h, const void *ptr, uint64_t size, char *why,
				      size_t why_size);
DATAFLOW_INTERNAL Dataflow_Status ledger_add_host_range(Dataflow_Handle *h, void *ptr, uint64_t size,
							unsigned int flags);
DATAFLOW_INTERNAL Dataflow_Status ledger_remove_host_range(Dataflow_Handle *h, void *ptr);
/* Peer links, changed and read with the registry locked (so a linked peer is open). */
DATAFLOW_INTERNAL Dataflow_Status ledger_add_peer(Dataflow_Handle *h, Dataflow_Handle *peer);
/* 1 if the link existed (and is gone now). */
DATAFLOW_INTERNAL int ledger_remove_peer(Dataflow_Handle *h, Dataflow_Handle *peer);
/* Copies up to max peers of h into peers; returns how many. */
DATAFLOW_INTERNAL int ledger_peers(Dataflow_Handle *h, Dataflow_Handle **peers, int max);

/* ---- op entries (register.c) ---- */

/* Runs the entry's state destroy and frees it with its backend record and signature. */
DATAFLOW_INTERNAL void op_entry_destroy(Dataflow_Op_Entry *entry);

/* ---- op checks (op_check.c) ---- */

/* Checks an op against its registered entry: arg count and dtypes, every op_args entry
 * non-NULL, then the entry's signature, or without one every non-NULL tensor accepted by
 * check_range (for one byte). check_range sets the error, naming `what`. */
DATAFLOW_INTERNAL Dataflow_Status op_entry_check(const Op *op, const Dataflow_Op_Entry *entry,
						 Dataflow_Range_Check_Fn check_range, void *ctx);

#endif
