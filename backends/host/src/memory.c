#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

/* Frees are stream-ordered: free_mem retires the block at once (ops and transfers submitted
 * after it reject the pointer) and returns; the block goes back to the arena when all work
 * queued before the free has finished. So freeing never stalls the caller, and queued
 * kernels never see their memory reused. */

static uint64_t stream_completed(Host_Stream *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t done = s->completed;
	pthread_mutex_unlock(&s->lock);
	return done;
}

/* Releases the pending frees whose preceding work has finished. */
static void reap_frees(Host_Handle *h)
{
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < h->num_pending_frees;) {
		Host_Pending_Free *p = &h->pending_frees[i];
		int done = 1;
		for (int s = 0; s < h->base.num_streams && done; s++)
			done = stream_completed(&h->streams[s]) >= p->submitted[s];
		if (done) {
			arena_release(&h->arena, p->ptr);
			*p = h->pending_frees[--h->num_pending_frees];
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&h->lock);
}

/* Waits for the work queued before every pending free (not from a stream worker, which
 * could be waiting for itself), then releases them. */
static void drain_frees(Host_Handle *h)
{
	if (stream_current())
		return;
	for (int s = 0; s < h->base.num_streams; s++) {
		uint64_t target = 0;
		pthread_mutex_lock(&h->lock);
		for (int i = 0; i < h->num_pending_frees; i++)
			if (h->pending_frees[i].submitted[s] > target)
				target = h->pending_frees[i].submitted[s];
		pthread_mutex_unlock(&h->lock);
		Host_Stream *st = &h->streams[s];
		pthread_mutex_lock(&st->lock);
		while (st->completed < target)
			pthread_cond_wait(&st->cond, &st->lock);
		pthread_mutex_unlock(&st->lock);
	}
	reap_frees(h);
}

Dataflow_Status host_alloc_mem(Dataflow_Handle *h, uint64_t size, void **ptr)
{
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: output pointer is NULL");
	*ptr = NULL;
	Host_Handle *hh = host_of(h);
	if (size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "alloc_mem: size_bytes must be > 0, got 0");
	if (size > hh->arena.capacity)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY,
					  "device memory: cannot allocate %llu bytes: capacity is %llu bytes",
					  (unsigned long long)size, (unsigned long long)hh->arena.capacity);
	reap_frees(hh);
	Dataflow_Status st = arena_alloc(&hh->arena, size, ptr);
	if (st == DATAFLOW_ERR_OUT_OF_MEMORY && hh->num_pending_frees > 0) {
		drain_frees(hh); /* memory freed but still in use by queued work: wait for it */
		st = arena_alloc(&hh->arena, size, ptr);
	}
	return st;
}

Dataflow_Status host_free_mem(Dataflow_Handle *h, void *ptr)
{
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "free_mem: pointer is NULL");
	Host_Handle *hh = host_of(h);
	Host_Pending_Free p = {.ptr = ptr};
	for (int s = 0; s < h->num_streams; s++) {
		pthread_mutex_lock(&hh->streams[s].lock);
		p.submitted[s] = hh->streams[s].submitted;
		pthread_mutex_unlock(&hh->streams[s].lock);
	}
	pthread_mutex_lock(&hh->lock);
	Host_Pending_Free *grown = realloc(hh->pending_frees, (size_t)(hh->num_pending_frees + 1) * sizeof(p));
	if (grown)
		hh->pending_frees = grown;
	Dataflow_Status st = grown ? arena_retire(&hh->arena, ptr)
				   : dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "free_mem: no memory");
	if (st == DATAFLOW_OK)
		hh->pending_frees[hh->num_pending_frees++] = p;
	pthread_mutex_unlock(&hh->lock);
	if (st == DATAFLOW_OK)
		reap_frees(hh);
	return st;
}

static int in_host_ranges(Host_Handle *h, const uint8_t *p, uint64_t size)
{
	int found = 0;
	pthread_mutex_lock(&h->lock);
	for (int i = 0; i < h->num_host_ranges && !found; i++) {
		const Host_Range *r = &h->host_ranges[i];
		found = p >= r->ptr && p < r->ptr + r->size && size <= (uint64_t)(r->ptr + r->size - p);
	}
	pthread_mutex_unlock(&h->lock);
	return found;
}

Dataflow_Status host_check_device_range(Host_Handle *h, const void *ptr, uint64_t size, int allow_peer,
					const char *what)
{
	char why[256];
	if (!ptr)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: pointer is NULL", what);
	if (arena_contains(&h->arena, ptr, size, why, sizeof(why)) || in_host_ranges(h, ptr, size))
		return DATAFLOW_OK;
	if (allow_peer) {
		char peer_why[256];
		pthread_mutex_lock(&h->lock);
		int n = h->num_peers;
		Host_Handle *peers[DATAFLOW_MAX_STREAMS];
		n = n < DATAFLOW_MAX_STREAMS ? n : DATAFLOW_MAX_STREAMS;
		memcpy(peers, h->peers, (size_t)n * sizeof(*peers));
		pthread_mutex_unlock(&h->lock);
		for (int i = 0; i < n; i++)
			if (arena_contains(&peers[i]->arena, ptr, size, peer_why, sizeof(peer_why)))
				return DATAFLOW_OK;
	}
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: %s", what, why);
}

Dataflow_Status host_check_mem_range(Dataflow_Handle *h, const void *ptr, uint64_t size, const char *what)
{
	return host_check_device_range(host_of(h), ptr, size, 0, what ? what : "memory range");
}

Dataflow_Status host_set_mem(Dataflow_Handle *h, int stream_id, void *ptr, uint8_t value, uint64_t size)
{
	Dataflow_Status st = dataflow_check_stream_id(h, stream_id, "set_mem");
	if (st == DATAFLOW_OK)
		st = host_check_device_range(host_of(h), ptr, size, 0, "set_mem destination");
	if (st != DATAFLOW_OK)
		return st;
	Task *t = task_new(TASK_MEMSET);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "set_mem: no memory for a task");
	t->u.memset.dst = ptr;
	t->u.memset.value = value;
	t->u.memset.size = size;
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

/* Host memory is already reachable by this backend; registering a range records it so
 * ops and transfers accept it as device-accessible, as page-locked memory is under CUDA. */
Dataflow_Status host_enable_access_to_host_mem(Dataflow_Handle *h, void *ptr, uint64_t size, unsigned int flags)
{
	(void)flags;
	Host_Handle *hh = host_of(h);
	if (!ptr || size == 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_host_mem: need a non-NULL pointer and size > 0, got %p, %llu",
					  ptr, (unsigned long long)size);
	pthread_mutex_lock(&hh->lock);
	for (int i = 0; i < hh->num_host_ranges; i++) {
		if (hh->host_ranges[i].ptr == ptr) {
			pthread_mutex_unlock(&hh->lock);
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "enable_access_to_host_mem: %p is already registered", ptr);
		}
	}
	Host_Range *r = realloc(hh->host_ranges, (size_t)(hh->num_host_ranges + 1) * sizeof(Host_Range));
	if (!r) {
		pthread_mutex_unlock(&hh->lock);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_host_mem: no memory");
	}
	hh->host_ranges = r;
	r[hh->num_host_ranges++] = (Host_Range){ptr, size};
	pthread_mutex_unlock(&hh->lock);
	return DATAFLOW_OK;
}

Dataflow_Status host_disable_access_to_host_mem(Dataflow_Handle *h, void *ptr)
{
	Host_Handle *hh = host_of(h);
	pthread_mutex_lock(&hh->lock);
	for (int i = 0; i < hh->num_host_ranges; i++) {
		if (hh->host_ranges[i].ptr == ptr) {
			hh->host_ranges[i] = hh->host_ranges[--hh->num_host_ranges];
			pthread_mutex_unlock(&hh->lock);
			return DATAFLOW_OK;
		}
	}
	pthread_mutex_unlock(&hh->lock);
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				  "disable_access_to_host_mem: %p was not registered with enable_access_to_host_mem", ptr);
}

Dataflow_Status host_enable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	if (!peer || peer == h || peer->backend_name != h->backend_name)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "enable_access_to_peer_mem: peer must be another host handle");
	Host_Handle *hh = host_of(h);
	pthread_mutex_lock(&hh->lock);
	for (int i = 0; i < hh->num_peers; i++) {
		if (hh->peers[i] == host_of(peer)) {
			pthread_mutex_unlock(&hh->lock);
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "enable_access_to_peer_mem: access to that peer is already enabled");
		}
	}
	Host_Handle **p = NULL;
	if (hh->num_peers < DATAFLOW_MAX_STREAMS)
		p = realloc(hh->peers, (size_t)(hh->num_peers + 1) * sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&hh->lock);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "enable_access_to_peer_mem: too many peers");
	}
	hh->peers = p;
	p[hh->num_peers++] = host_of(peer);
	pthread_mutex_unlock(&hh->lock);
	return DATAFLOW_OK;
}

Dataflow_Status host_disable_access_to_peer_mem(Dataflow_Handle *h, Dataflow_Handle *peer)
{
	Host_Handle *hh = host_of(h);
	pthread_mutex_lock(&hh->lock);
	for (int i = 0; i < hh->num_peers; i++) {
		if (hh->peers[i] == host_of(peer)) {
			hh->peers[i] = hh->peers[--hh->num_peers];
			pthread_mutex_unlock(&hh->lock);
			return DATAFLOW_OK;
		}
	}
	pthread_mutex_unlock(&hh->lock);
	return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
				  "disable_access_to_peer_mem: access to that peer was not enabled");
}

Dataflow_Status host_query_mem(Dataflow_Handle *h, uint64_t *capacity, uint64_t *in_use)
{
	reap_frees(host_of(h));
	Arena *a = &host_of(h)->arena;
	pthread_mutex_lock(&a->lock);
	if (capacity)
		*capacity = a->capacity;
	if (in_use)
		*in_use = a->in_use;
	pthread_mutex_unlock(&a->lock);
	return DATAFLOW_OK;
}
