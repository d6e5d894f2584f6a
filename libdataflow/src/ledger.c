#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_list.h"
#include "handle_internal.h"

/* The memory ledger, one per handle whatever the backend: the capacity and the bytes in use (in
 * 256-byte units) with their peak; the live allocations with the exact extents that ranges are
 * checked against; host ranges registered with the handle; its peer links.
 *
 * Frees are stream-ordered and never block: a freed block is retired at once (checks reject
 * it), an event is recorded on every stream, and the block goes back to the backend (its raw
 * release) once every stream has passed its event. Pending frees are reaped, without blocking,
 * by later ledger calls; an allocation that does not fit waits for them before failing. */

typedef struct {
	uint64_t addr, size;
	uint64_t events[DATAFLOW_MAX_STREAMS]; /* per stream: the point the free follows */
} Pending_Free;

struct Dataflow_Ledger {
	pthread_mutex_t lock;
	uint64_t capacity, in_use, peak;
	uint64_t releasing; /* bytes of in_use on their way back to the backend (reap) */
	/* every address range ever allocated lies in [lo, hi): a pointer outside was never device
	 * memory of this handle (foreign), one inside is freed or stray */
	uint64_t lo, hi;
	Block_List live; /* offset = address; retired: freed, waiting for queued work */
	Block_List host; /* host ranges (enable_access_to_host_mem) */
	Pending_Free *pending;
	int num_pending, cap_pending;
	uint64_t done[DATAFLOW_MAX_STREAMS]; /* per stream: the latest event known to be done */
	Dataflow_Handle **peers;
	int num_peers;
};

static uint64_t round_up(uint64_t x)
{
	return (x + LEDGER_ALIGN - 1) / LEDGER_ALIGN * LEDGER_ALIGN;
}

Dataflow_Status ledger_create(Dataflow_Handle *h, uint64_t capacity)
{
	Dataflow_Ledger *l = calloc(1, sizeof(*l));
	if (!l)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "handle create: no memory for the memory ledger");
	/* whole units, rounded down so that no size near 2^64 wraps */
	l->capacity = capacity / LEDGER_ALIGN * LEDGER_ALIGN;
	l->lo = UINT64_MAX;
	pthread_mutex_init(&l->lock, NULL);
	h->ledger = l;
	return DATAFLOW_OK;
}

void ledger_destroy(Dataflow_Handle *h)
{
	Dataflow_Ledger *l = h->ledger;
	if (!l)
		return;
	for (int i = 0; i < l->live.count; i++)
		h->iface->mem_release(h, (void *)(uintptr_t)l->live.items[i].offset, l->live.items[i].size);
	for (int i = 0; i < l->host.count && h->iface->unregister_host_mem; i++)
		h->iface->unregister_host_mem(h, (void *)(uintptr_t)l->host.items[i].offset);
	block_list_free(&l->live);
	block_list_free(&l->host);
	free(l->pending);
	free(l->peers);
	pthread_mutex_destroy(&l->lock);
	free(l);
	h->ledger = NULL;
}

/* 1 if every stream has passed the free's events (asking the backend only about events not
 * yet known to be done); called with the lock held. */
static int free_done(Dataflow_Handle *h, const Pending_Free *p)
{
	Dataflow_Ledger *l = h->ledger;
	for (int s = 0; s < h->num_streams; s++) {
		if (p->events[s] <= l->done[s])
			continue;
		if (!h->iface->query_event(h, s, p->events[s]))
			return 0;
		l->done[s] = p->events[s];
	}
	return 1;
}

/* Gives the frees whose work is done back to the backend. A block leaves the live list before
 * the backend has it back (the backend may hand the address out again at once), but stays
 * accounted until then, so an allocation never counts on memory the backend does not have yet. */
static void reap(Dataflow_Handle *h)
{
	Dataflow_Ledger *l = h->ledger;
	for (;;) {
		Pending_Free ready[16];
		int n = 0;
		pthread_mutex_lock(&l->lock);
		/* pending frees are in the order of their events: one not done means none after it is */
		while (n < 16 && n < l->num_pending && free_done(h, &l->pending[n])) {
			ready[n] = l->pending[n];
			block_list_remove_at(&l->live, block_list_floor(&l->live, ready[n].addr));
			n++;
		}
		if (n == 0) {
			pthread_mutex_unlock(&l->lock);
			return;
		}
		memmove(l->pending, l->pending + n, (size_t)(l->num_pending - n) * sizeof(Pending_Free));
		l->num_pending -= n;
		uint64_t released = 0;
		for (int i = 0; i < n; i++)
			released += ready[i].size;
		__atomic_fetch_add(&l->releasing, released, __ATOMIC_RELEASE); /* read unlocked by wait_pending */
		pthread_mutex_unlock(&l->lock);
		for (int i = 0; i < n; i++)
			h->iface->mem_release(h, (void *)(uintptr_t)ready[i].addr, ready[i].size);
		pthread_mutex_lock(&l->lock);
		l->in_use -= released;
		__atomic_fetch_sub(&l->releasing, released, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&l->lock);
	}
}

/* Blocks until the work queued before every pending free is done, then releases them (and
 * waits for releases other threads have begun). Not from the handle's own workers: they may be
 * the work waited for. Returns 0 if there was nothing to wait for. */
static int wait_pending(Dataflow_Handle *h)
{
	Dataflow_Ledger *l = h->ledger;
	if (h->iface->on_worker(h))
		return 0;
	uint64_t target[DATAFLOW_MAX_STREAMS] = {0};
	pthread_mutex_lock(&l->lock);
	int any = l->num_pending > 0 || l->releasing > 0;
	for (int i = 0; i < l->num_pending; i++)
		for (int s = 0; s < h->num_streams; s++)
			if (l->pending[i].events[s] > target[s])
				target[s] = l->pending[i].events[s];
	for (int s = 0; s < h->num_streams; s++)
		if (target[s] <= l->done[s])
			target[s] = 0;
	pthread_mutex_unlock(&l->lock);
	for (int s = 0; s < h->num_streams; s++)
		if (target[s])
			h->iface->wait_event(h, s, target[s]);
	reap(h);
	while (__atomic_load_n(&l->releasing, __ATOMIC_ACQUIRE) > 0)
		sched_yield();
	return any;
}

static Dataflow_Status out_of_memory(Dataflow_Ledger *l, uint64_t size, uint64_t need)
{
	pthread_mutex_lock(&l->lock);
	uint64_t in_use = l->in_use, pending = 0;
	for (int i = 0; i < l->num_pending; i++)
		pending += l->pending[i].size;
	pthread_mutex_unlock(&l->lock);
	char freed[96] = "";
	if (pending)
		snprintf(freed, sizeof(freed), " (%llu of it freed, still used by queued work)",
			 (unsigned long long)pending);
	return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
				  "device memory: cannot allocate %llu bytes (%llu after 256-byte alignment): capacity %llu, "
				  "in use %llu%s",
				  (unsigned long long)size, (unsigned long long)need, (unsigned long long)l->capacity,
				  (unsigned long long)in_use, freed);
}

/* Accounts need bytes if they fit; 1 if they did. */
static int reserve(Dataflow_Ledger *l, uint64_t need)
{
	pthread_mutex_lock(&l->lock);
	int fits = need <= l->capacity - l->in_use;
	if (fits) {
		l->in_use += need;
		if (l->in_use > l->peak)
			l->peak = l->in_use;
	}
	pthread_mutex_unlock(&l->lock);
	return fits;
}

Dataflow_Status ledger_alloc(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	Dataflow_Ledger *l = h->ledger;
	if (size > l->capacity)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes: capacity is %llu bytes",
					  (unsigned long long)size, (unsigned long long)l->capacity);
	uint64_t need = round_up(size);
	reap(h);
	if (!reserve(l, need) && !(wait_pending(h) && reserve(l, need)))
		return out_of_memory(l, size, need);
	/* The backend may not fit it even so (a fragmented host arena): freed blocks may help. */
	Dataflow_Status st = h->iface->mem_alloc(h, need, ptr);
	if (st == DATAFLOW_ERR_OUT_OF_MEMORY && wait_pending(h))
		st = h->iface->mem_alloc(h, need, ptr);
	pthread_mutex_lock(&l->lock);
	uint64_t addr = (uint64_t)(uintptr_t)*ptr;
	if (st == DATAFLOW_OK && !block_list_insert(&l->live, (Block){.offset = addr, .size = need, .requested = size})) {
		h->iface->mem_release(h, *ptr, need);
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "alloc_mem: no memory for the allocation list");
	}
	if (st == DATAFLOW_OK) {
		l->lo = addr < l->lo ? addr : l->lo;
		l->hi = addr + need > l->hi ? addr + need : l->hi;
	} else {
		l->in_use -= need;
		*ptr = NULL;
	}
	pthread_mutex_unlock(&l->lock);
	return st;
}

/* Index of the live, not yet freed block starting at ptr, or -1 with the error set; called
 * with the lock held. */
static int find_start(Dataflow_Ledger *l, void *ptr)
{
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	int i = block_list_floor(&l->live, addr);
	const Block *b = i >= 0 ? &l->live.items[i] : NULL;
	if (b && b->offset == addr && !b->retired)
		return i;
	const char *why = addr < l->lo || addr >= l->hi ? "is not device memory of this handle (foreign pointer)"
			  : b && !b->retired && addr < b->offset + b->size ? "points inside an allocation, not at its start"
									  : "is not a live allocation (already freed?)";
	dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "free: pointer %p %s", ptr, why);
	return -1;
}

Dataflow_Status ledger_free(Dataflow_Handle *h, void *ptr)
{
	Dataflow_Ledger *l = h->ledger;
	pthread_mutex_lock(&l->lock);
	int i = find_start(l, ptr);
	if (i >= 0 && l->num_pending == l->cap_pending) {
		int cap = l->cap_pending ? 2 * l->cap_pending : 64;
		Pending_Free *grown = realloc(l->pending, (size_t)cap * sizeof(Pending_Free));
		if (!grown) {
			pthread_mutex_unlock(&l->lock);
			return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "free_mem: no memory to record the free");
		}
		l->pending = grown;
		l->cap_pending = cap;
	}
	/* Retired and its events recorded under one lock: any work that could still name the block
	 * was queued before the events. */
	Dataflow_Status st = i >= 0 ? DATAFLOW_OK : DATAFLOW_ERR_INVALID_ARGUMENT;
	Pending_Free *p = i >= 0 ? &l->pending[l->num_pending] : NULL;
	for (int s = 0; s < h->num_streams && st == DATAFLOW_OK; s++)
		st = h->iface->record_event(h, s, &p->events[s]);
	if (st == DATAFLOW_OK) {
		l->live.items[i].retired = 1;
		p->addr = (uint64_t)(uintptr_t)ptr;
		p->size = l->live.items[i].size;
		l->num_pending++;
	}
	pthread_mutex_unlock(&l->lock);
	if (st == DATAFLOW_OK)
		reap(h);
	return st;
}

void ledger_info(Dataflow_Handle *h, Dataflow_Memory_Info *info)
{
	Dataflow_Ledger *l = h->ledger;
	reap(h);
	pthread_mutex_lock(&l->lock);
	*info = (Dataflow_Memory_Info){l->capacity, l->in_use, l->peak};
	pthread_mutex_unlock(&l->lock);
}

void ledger_reset_peak(Dataflow_Handle *h)
{
	Dataflow_Ledger *l = h->ledger;
	reap(h);
	pthread_mutex_lock(&l->lock);
	l->peak = l->in_use;
	pthread_mutex_unlock(&l->lock);
}

int ledger_contains(Dataflow_Handle *h, const void *ptr, uint64_t size, char *why, size_t why_size)
{
	Dataflow_Ledger *l = h->ledger;
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	char ignored[8];
	pthread_mutex_lock(&l->lock);
	int ok = block_list_contains(&l->live, addr, size, ptr, why, why_size) ||
		 block_list_contains(&l->host, addr, size, ptr, ignored, sizeof(ignored));
	int foreign = addr < l->lo || addr >= l->hi;
	pthread_mutex_unlock(&l->lock);
	if (!ok && foreign)
		snprintf(why, why_size, "pointer %p is not device memory of this handle", ptr);
	return ok;
}

Dataflow_Status ledger_add_host_range(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	Dataflow_Ledger *l = h->ledger;
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	pthread_mutex_lock(&l->lock);
	int i = block_list_floor(&l->host, addr + size - 1);
	const Block *b = i >= 0 ? &l->host.items[i] : NULL;
	int overlaps = b && b->offset + b->size > addr;
	int room = block_list_reserve(&l->host, l->host.count + 1);
	pthread_mutex_unlock(&l->lock);
	if (overlaps)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_host_mem: [%p, +%llu bytes) overlaps host memory already "
					  "registered at %p",
					  ptr, (unsigned long long)size, (void *)(uintptr_t)b->offset);
	if (!room)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_host_mem: no memory");
	Dataflow_Status st = h->iface->register_host_mem ? h->iface->register_host_mem(h, ptr, size, flags) : DATAFLOW_OK;
	if (st != DATAFLOW_OK)
		return st;
	pthread_mutex_lock(&l->lock);
	int ok = block_list_insert(&l->host, (Block){.offset = addr, .size = size, .requested = size});
	pthread_mutex_unlock(&l->lock);
	if (!ok && h->iface->unregister_host_mem)
		h->iface->unregister_host_mem(h, ptr);
	return ok ? DATAFLOW_OK : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_host_mem: no memory");
}

Dataflow_Status ledger_remove_host_range(Dataflow_Handle *h, void *ptr)
{
	Dataflow_Ledger *l = h->ledger;
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	pthread_mutex_lock(&l->lock);
	int i = block_list_floor(&l->host, addr);
	int found = i >= 0 && l->host.items[i].offset == addr;
	if (found)
		block_list_remove_at(&l->host, i);
	pthread_mutex_unlock(&l->lock);
	if (!found)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "disable_access_to_host_mem: %p was not registered with enable_access_to_host_mem",
					  ptr);
	if (h->iface->unregister_host_mem)
		h->iface->unregister_host_mem(h, ptr);
	return DATAFLOW_OK;
}

Dataflow_Status ledger_add_peer(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Dataflow_Ledger *l = h->ledger;
	pthread_mutex_lock(&l->lock);
	int known = 0;
	for (int i = 0; i < l->num_peers; i++)
		known |= l->peers[i] == peer;
	Dataflow_Handle **grown = known || l->num_peers == LEDGER_MAX_PEERS
					  ? NULL
					  : realloc(l->peers, (size_t)(l->num_peers + 1) * sizeof(*grown));
	if (grown) {
		l->peers = grown;
		grown[l->num_peers++] = peer;
	}
	pthread_mutex_unlock(&l->lock);
	if (known)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_peer_mem: access to that peer is already enabled");
	return grown ? DATAFLOW_OK
		     : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_peer_mem: more than %d peers, or no memory",
					  LEDGER_MAX_PEERS);
}

int ledger_remove_peer(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Dataflow_Ledger *l = h->ledger;
	int found = 0;
	pthread_mutex_lock(&l->lock);
	for (int i = 0; i < l->num_peers && !found; i++)
		if ((found = l->peers[i] == peer))
			l->peers[i] = l->peers[--l->num_peers];
	pthread_mutex_unlock(&l->lock);
	return found;
}

int ledger_peers(Dataflow_Handle *h, Dataflow_Handle **peers, int max)
{
	Dataflow_Ledger *l = h->ledger;
	pthread_mutex_lock(&l->lock);
	int n = l->num_peers < max ? l->num_peers : max;
	if (n > 0)
		memcpy(peers, l->peers, (size_t)n * sizeof(*peers));
	pthread_mutex_unlock(&l->lock);
	return n;
}
