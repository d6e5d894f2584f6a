/* The public entry points: each checks its arguments once (handle open, stream ids, the op and
 * its arguments against the signature it was registered with, pointers against the memory
 * ledger, sizes), then calls the backend, which checks nothing again. */
#include <stdio.h>

#include "handle_internal.h"

/* The getters answer for open handles only (a destroyed one is found out from the registry, not
 * read), and like NULL otherwise: a model or communicator that outlived its handle gets an error
 * from its next call, not a read of freed memory. */
static int open_handle(const Dataflow_Handle *h)
{
	if (!h)
		return 0;
	registry_lock();
	int found = registry_has(h);
	registry_unlock();
	return found;
}

const char *dataflow_handle_backend_name(const Dataflow_Handle *h)
{
	return open_handle(h) ? h->backend_name : "";
}

int dataflow_handle_device_index(const Dataflow_Handle *h)
{
	return open_handle(h) ? h->device_index : -1;
}

int dataflow_handle_num_streams(const Dataflow_Handle *h)
{
	return open_handle(h) ? h->num_streams : 0;
}

const char *dataflow_handle_default_ops_library(const Dataflow_Handle *h)
{
	return open_handle(h) ? h->default_ops_library : NULL;
}

uint64_t dataflow_handle_host_syncs(const Dataflow_Handle *h)
{
	return open_handle(h) ? __atomic_load_n(&h->num_host_syncs, __ATOMIC_RELAXED) : 0;
}

static Dataflow_Status check_stream(const Dataflow_Handle *h, int stream_id, const char *what)
{
	if (stream_id < 0 || stream_id >= h->num_streams)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: stream id must be in [0, %d) for this handle, got %d", what, h->num_streams,
					  stream_id);
	return DATAFLOW_OK;
}

static Dataflow_Status check_size(const char *what, uint64_t size)
{
	if (size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: size_bytes must be > 0, got 0", what);
	return DATAFLOW_OK;
}

/* OK if [ptr, ptr + size) is memory h may use: a live allocation of h or a host range
 * registered with it, or, when peer_locked is given, a live allocation of a peer h has access
 * to. A peer's memory leaves the registry locked (*peer_locked = 1) until the caller has queued
 * its work, so that the peer cannot be destroyed in between. *owner (may be NULL): whose memory. */
static Dataflow_Status check_range(Dataflow_Handle *h, const void *ptr, uint64_t size, int *peer_locked,
				   Dataflow_Handle **owner, const char *what)
{
	char why[256], ignored[256];
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: pointer is NULL", what);
	if (owner)
		*owner = h;
	if (ledger_contains(h, ptr, size, why, sizeof(why)))
		return DATAFLOW_OK;
	if (peer_locked) {
		Dataflow_Handle *peers[LEDGER_MAX_PEERS];
		registry_lock();
		int n = ledger_peers(h, peers, LEDGER_MAX_PEERS);
		for (int i = 0; i < n; i++) {
			if (ledger_contains(peers[i], ptr, size, ignored, sizeof(ignored))) {
				if (owner)
					*owner = peers[i];
				if (*peer_locked)
					registry_unlock(); /* locked once is enough */
				*peer_locked = 1;
				return DATAFLOW_OK;
			}
		}
		registry_unlock();
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s, nor of a peer handle it has access to",
					  what, why);
	}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s", what, why);
}

static void unlock_peers(int peer_locked)
{
	if (peer_locked)
		registry_unlock();
}

/* ---- compute ---- */

int dataflow_op_is_registered(Dataflow_Handle *h, const Op_Skeleton *skeleton)
{
	if (!skeleton || handle_enter(h, "op_is_registered") != DATAFLOW_OK)
		return 0;
	int found = dataflow_op_table_lookup(h->op_table, skeleton->fingerprint) != NULL;
	handle_leave(h, DATAFLOW_OK);
	return found;
}

/* The range check an op's signature (or the generic tensor check) calls: memory of the handle,
 * a host range registered with it, or a peer's memory it has access to. A peer found leaves the
 * registry locked until the caller is done with the op (unlock_peers). */
typedef struct {
	Dataflow_Handle *h;
	int peer_locked;
} Op_Ranges;

static Dataflow_Status check_op_range(void *ctx, const void *ptr, uint64_t size_bytes, const char *what)
{
	Op_Ranges *c = ctx;
	return check_range(c->h, ptr, size_bytes, &c->peer_locked, NULL, what);
}

/* Finds op's entry (the op table stays read-locked until dataflow_op_table_release when found)
 * and checks op against it. *entry: the entry or NULL. */
static Dataflow_Status check_op(Dataflow_Handle *h, const Op *op, Op_Ranges *ranges, Dataflow_Op_Entry **entry,
			       const char *what)
{
	*entry = NULL;
	if (!op)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: op is NULL", what);
	if (!(*entry = dataflow_op_table_acquire(h->op_table, op->skeleton.fingerprint)))
		return dataflow_op_table_unknown_error(h->op_table, &op->skeleton);
	return op_entry_check(op, *entry, check_op_range, ranges);
}

Dataflow_Status dataflow_op_check(Dataflow_Handle *h, const Op *op)
{
	HANDLE_ENTER(h, "op_check");
	Op_Ranges ranges = {h, 0};
	Dataflow_Op_Entry *e;
	Dataflow_Status st = check_op(h, op, &ranges, &e, "op_check");
	unlock_peers(ranges.peer_locked);
	if (e)
		dataflow_op_table_release(h->op_table);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_submit_op(Dataflow_Handle *h, const Op *op, int stream_id)
{
	HANDLE_ENTER(h, "submit_op");
	Op_Ranges ranges = {h, 0};
	Dataflow_Op_Entry *e = NULL;
	Dataflow_Status st = check_stream(h, stream_id, "submit_op");
	/* the op's registered skeleton, its arguments, and its signature: the backend trusts them */
	if (st == DATAFLOW_OK)
		st = check_op(h, op, &ranges, &e, "submit_op");
	if (st == DATAFLOW_OK) {
		op_code_begin(h); /* the op's launch function, or on some backends its external function */
		st = h->iface->submit_op(h, stream_id, op, e);
		op_code_end();
	}
	unlock_peers(ranges.peer_locked);
	if (e)
		dataflow_op_table_release(h->op_table);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id)
{
	HANDLE_ENTER(h, "submit_host_op");
	Dataflow_Status st = check_stream(h, stream_id, "submit_host_op");
	if (st == DATAFLOW_OK && !func)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "submit_host_op: function is NULL");
	if (st == DATAFLOW_OK)
		st = h->iface->submit_host_op(h, stream_id, func, arg);
	return handle_leave(h, st);
}

/* ---- dependencies ---- */

Dataflow_Status dataflow_get_stream_state(Dataflow_Handle *h, int stream_id, Dataflow_Stream_State *state)
{
	HANDLE_ENTER(h, "get_stream_state");
	Dataflow_Status st = check_stream(h, stream_id, "get_stream_state");
	if (st == DATAFLOW_OK && !state)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "get_stream_state: state pointer is NULL");
	uint64_t value = 0;
	if (st == DATAFLOW_OK)
		st = h->iface->record_event(h, stream_id, &value);
	if (st == DATAFLOW_OK)
		*state = (Dataflow_Stream_State){.handle_id = h->id, .stream_id = stream_id, .value = value};
	return handle_leave(h, st);
}

/* Finds the state's handle in the registry (locked by the caller) and checks the state. */
static Dataflow_Status state_handle(Dataflow_Handle *h, const Dataflow_Stream_State *state, Dataflow_Handle **other)
{
	if (!state || state->handle_id == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: state is NULL or was never recorded");
	if (!(*other = registry_find(state->handle_id)))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: the state was recorded on handle %llu, which has been "
					  "destroyed",
					  (unsigned long long)state->handle_id);
	if ((*other)->iface != h->iface)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: the state was recorded by the %s backend, this handle is %s",
					  (*other)->backend_name, h->backend_name);
	if (state->stream_id < 0 || state->stream_id >= (*other)->num_streams)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: the state names stream %d; its handle has %d streams",
					  state->stream_id, (*other)->num_streams);
	return DATAFLOW_OK;
}

Dataflow_Status dataflow_submit_dependency(Dataflow_Handle *h, int stream_id, const Dataflow_Stream_State *state)
{
	HANDLE_ENTER(h, "submit_dependency");
	Dataflow_Handle *other = NULL;
	/* the registry stays locked until the wait is queued: the other handle cannot go meanwhile */
	registry_lock();
	Dataflow_Status st = check_stream(h, stream_id, "submit_dependency");
	if (st == DATAFLOW_OK)
		st = state_handle(h, state, &other);
	if (st == DATAFLOW_OK && !(other == h && state->stream_id == stream_id)) /* else stream order does it */
		st = h->iface->submit_dependency(h, stream_id, other, state->stream_id, state->value);
	registry_unlock();
	return handle_leave(h, st);
}

Dataflow_Status dataflow_sync_stream(Dataflow_Handle *h, int stream_id)
{
	HANDLE_ENTER(h, "sync_stream");
	Dataflow_Status st = check_stream(h, stream_id, "sync_stream");
	if (st == DATAFLOW_OK) {
		__atomic_fetch_add(&h->num_host_syncs, 1, __ATOMIC_RELAXED);
		st = h->iface->sync_stream(h, stream_id);
	}
	return handle_leave(h, st);
}

/* Every stream, each reporting its first asynchronous failure; the first one is returned. */
Dataflow_Status dataflow_sync_handle(Dataflow_Handle *h)
{
	HANDLE_ENTER(h, "sync_handle");
	__atomic_fetch_add(&h->num_host_syncs, 1, __ATOMIC_RELAXED);
	Dataflow_Status first = DATAFLOW_OK;
	char message[1024] = "";
	for (int s = 0; s < h->num_streams; s++) {
		Dataflow_Status st = h->iface->sync_stream(h, s);
		if (st != DATAFLOW_OK && first == DATAFLOW_OK) {
			first = st;
			snprintf(message, sizeof(message), "%s", dataflow_last_error());
		}
	}
	return handle_leave(h, first == DATAFLOW_OK ? DATAFLOW_OK : dataflow_set_error(first, "%s", message));
}

/* ---- memory ---- */

Dataflow_Status dataflow_alloc_mem(Dataflow_Handle *h, uint64_t size_bytes, void **ptr)
{
	HANDLE_ENTER(h, "alloc_mem");
	Dataflow_Status st = ptr ? check_size("alloc_mem", size_bytes)
				 : dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: output pointer is NULL");
	if (ptr)
		*ptr = NULL;
	if (st == DATAFLOW_OK)
		st = ledger_alloc(h, size_bytes, ptr);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_free_mem(Dataflow_Handle *h, void *ptr)
{
	HANDLE_ENTER(h, "free_mem");
	Dataflow_Status st = ptr ? ledger_free(h, ptr) : dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "free_mem: pointer is NULL");
	return handle_leave(h, st);
}

Dataflow_Status dataflow_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size_bytes)
{
	HANDLE_ENTER(h, "set_mem");
	Dataflow_Status st = check_stream(h, stream_id, "set_mem");
	if (st == DATAFLOW_OK)
		st = check_range(h, ptr, size_bytes, NULL, NULL, "set_mem destination");
	if (st == DATAFLOW_OK)
		st = h->iface->set_mem(h, stream_id, ptr, value, size_bytes);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_enable_access_to_host_mem(Dataflow_Handle *h, void *host_ptr, uint64_t size_bytes,
						   unsigned int flags)
{
	HANDLE_ENTER(h, "enable_access_to_host_mem");
	Dataflow_Status st = DATAFLOW_OK;
	if (!host_ptr || size_bytes == 0 || size_bytes > UINT64_MAX - (uint64_t)(uintptr_t)host_ptr)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"enable_access_to_host_mem: need a non-NULL pointer and a size > 0 that stays "
					"in the address space, got %p, %llu",
					host_ptr, (unsigned long long)size_bytes);
	if (st == DATAFLOW_OK)
		st = ledger_add_host_range(h, host_ptr, size_bytes, flags);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_disable_access_to_host_mem(Dataflow_Handle *h, void *host_ptr)
{
	HANDLE_ENTER(h, "disable_access_to_host_mem");
	Dataflow_Status st = ledger_remove_host_range(h, host_ptr);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_enable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	HANDLE_ENTER(h, "enable_access_to_peer_mem");
	Dataflow_Status st = DATAFLOW_OK;
	registry_lock();
	if (!peer || peer == h || !registry_has(peer))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"enable_access_to_peer_mem: peer must be another open handle");
	else if (peer->iface != h->iface)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"enable_access_to_peer_mem: peer is a %s handle, this one %s; peers share a backend",
					peer->backend_name, h->backend_name);
	if (st == DATAFLOW_OK && h->iface->enable_peer)
		st = h->iface->enable_peer(h, peer);
	if (st == DATAFLOW_OK && (st = ledger_add_peer(h, peer)) != DATAFLOW_OK && h->iface->disable_peer)
		h->iface->disable_peer(h, peer);
	registry_unlock();
	return handle_leave(h, st);
}

Dataflow_Status dataflow_disable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	HANDLE_ENTER(h, "disable_access_to_peer_mem");
	Dataflow_Status st = DATAFLOW_OK;
	registry_lock();
	if (!ledger_remove_peer(h, peer))
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"disable_access_to_peer_mem: access to that peer was not enabled (or the peer has "
					"been destroyed)");
	else if (h->iface->disable_peer)
		h->iface->disable_peer(h, peer);
	registry_unlock();
	return handle_leave(h, st);
}

Dataflow_Status dataflow_memory_info(Dataflow_Handle *h, Dataflow_Memory_Info *info)
{
	HANDLE_ENTER(h, "memory_info");
	if (!info)
		return handle_leave(h, dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "memory_info: info pointer is NULL"));
	ledger_info(h, info);
	return handle_leave(h, DATAFLOW_OK);
}

Dataflow_Status dataflow_reset_memory_peak(Dataflow_Handle *h)
{
	HANDLE_ENTER(h, "reset_memory_peak");
	ledger_reset_peak(h);
	return handle_leave(h, DATAFLOW_OK);
}

Dataflow_Status dataflow_check_mem_range(Dataflow_Handle *h, const void *ptr, uint64_t size_bytes, const char *what)
{
	HANDLE_ENTER(h, "check_mem_range");
	Dataflow_Status st = check_range(h, ptr, size_bytes, NULL, NULL, what ? what : "memory range");
	return handle_leave(h, st);
}

/* ---- transfers ---- */

/* inbound (host -> device) and outbound: the device side inside the handle's memory, the host
 * side non-NULL. */
static Dataflow_Status host_transfer(Dataflow_Handle *h, int stream_id, void *dst, const void *src, uint64_t size,
				     int outbound)
{
	const char *what = outbound ? "outbound transfer" : "inbound transfer";
	HANDLE_ENTER(h, what);
	const void *dev = outbound ? src : dst, *host = outbound ? dst : src;
	Dataflow_Status st = check_stream(h, stream_id, what);
	if (st == DATAFLOW_OK)
		st = check_size(what, size);
	if (st == DATAFLOW_OK)
		st = check_range(h, dev, size, NULL, NULL, outbound ? "outbound transfer source" : "inbound transfer destination");
	if (st == DATAFLOW_OK && !host)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s %s: host pointer is NULL", what,
					outbound ? "destination" : "source");
	if (st == DATAFLOW_OK)
		st = outbound ? h->iface->submit_outbound_transfer(h, stream_id, dst, src, size)
			      : h->iface->submit_inbound_transfer(h, stream_id, dst, src, size);
	return handle_leave(h, st);
}

Dataflow_Status dataflow_submit_inbound_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst,
						 const void *host_src, uint64_t size_bytes)
{
	return host_transfer(h, stream_id, dev_dst, host_src, size_bytes, 0);
}

Dataflow_Status dataflow_submit_outbound_transfer(Dataflow_Handle *h, int stream_id, void *host_dst,
						  const void *dev_src, uint64_t size_bytes)
{
	return host_transfer(h, stream_id, host_dst, dev_src, size_bytes, 1);
}

Dataflow_Status dataflow_submit_peer_transfer(Dataflow_Handle *h, int stream_id, void *dev_dst, const void *dev_src,
					      uint64_t size_bytes)
{
	HANDLE_ENTER(h, "peer transfer");
	int peer_locked = 0;
	Dataflow_Handle *dst_owner = NULL, *src_owner = NULL;
	Dataflow_Status st = check_stream(h, stream_id, "peer transfer");
	if (st == DATAFLOW_OK)
		st = check_size("peer transfer", size_bytes);
	if (st == DATAFLOW_OK)
		st = check_range(h, dev_dst, size_bytes, &peer_locked, &dst_owner, "peer transfer destination");
	if (st == DATAFLOW_OK)
		st = check_range(h, dev_src, size_bytes, &peer_locked, &src_owner, "peer transfer source");
	if (st == DATAFLOW_OK)
		st = h->iface->submit_peer_transfer(h, stream_id, dev_dst, dst_owner, dev_src, src_owner, size_bytes);
	unlock_peers(peer_locked);
	return handle_leave(h, st);
}
