/* The MPI transport: a collective is an external op registered on the bound handle, so it runs
 * on the stream's worker in stream order and its failure is the stream's (sync reports it).
 * The algorithm is the same for every MPI library: reduce-scatter by exchanging parts with
 * every peer and adding them in rank order (rank_order_sum.c), then all-gather by exchanging
 * the reduced parts; point-to-point messages, so that a wait past the timeout can name the
 * ranks that did not answer. Messages of a collective carry tags from its sequence number. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_library.h"

#define PIECE_BYTES ((int64_t)1 << 30) /* MPI counts are int */
#define TAG_SEQUENCES 16000            /* tags 2 * (seq % 16000) + phase stay under MPI's minimum bound 32767 */

enum { A_SEND, A_RECV, A_KIND, A_DTYPE, A_COUNT, A_OP, A_ROOT, A_SEQ, NUM_ARGS };

/* The registered op's state (the handle owns and frees it): comm is NULL once the
 * communicator is destroyed, so an op someone submits after that fails clearly. */
typedef struct {
	Dataflow_Comm *comm;
} Op_Slot;

typedef struct {
	const Mpi_Library *mpi;
	Mpi_Obj world; /* a duplicate of MPI_COMM_WORLD: our tags never meet the program's */
	pthread_mutex_t lock; /* one MPI call at a time (MPI_THREAD_SERIALIZED), and failure */
	uint64_t next_seq;
	char failure[600]; /* the first failure; set: the communicator is broken */
	Op_Skeleton skeleton;
	Op_Slot *slot;
} Mpi_Comm;

typedef struct {
	int peer, send;
	void *buf;
	int64_t bytes;
} Message;

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static Dataflow_Status fail(Mpi_Comm *mc, const char *fmt, const char *what, const char *detail)
{
	pthread_mutex_lock(&mc->lock);
	if (!mc->failure[0])
		snprintf(mc->failure, sizeof(mc->failure), fmt, what, detail);
	pthread_mutex_unlock(&mc->lock);
	return dataflow_set_error(DATAFLOW_ERR_BACKEND, fmt, what, detail);
}

/* Posts every message (split in pieces of at most PIECE_BYTES) and waits for all of them
 * until the communicator's timeout. */
static Dataflow_Status exchange(Dataflow_Comm *c, const Message *msgs, int n, int tag, const char *what)
{
	Mpi_Comm *mc = c->ctx;
	const Mpi_Library *mpi = mc->mpi;
	int64_t num_req = 0;
	for (int i = 0; i < n; i++)
		num_req += (msgs[i].bytes + PIECE_BYTES - 1) / PIECE_BYTES;
	Mpi_Obj *req = calloc((size_t)num_req + 1, sizeof(*req));
	int *owner = calloc((size_t)num_req + 1, sizeof(*owner));
	char *done = calloc((size_t)num_req + 1, 1);
	if (!req || !owner || !done) {
		free(req), free(owner), free(done);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory for %lld requests", what,
					  (long long)num_req);
	}
	char detail[400] = "";
	int64_t r = 0;
	pthread_mutex_lock(&mc->lock);
	for (int i = 0; i < n && !detail[0]; i++) {
		for (int64_t at = 0; at < msgs[i].bytes && !detail[0]; at += PIECE_BYTES, r++) {
			int bytes = (int)(msgs[i].bytes - at < PIECE_BYTES ? msgs[i].bytes - at : PIECE_BYTES);
			char *p = (char *)msgs[i].buf + at;
			int rc = msgs[i].send ? mpi->Isend(p, bytes, mpi->byte, msgs[i].peer, tag, mc->world, &req[r])
					      : mpi->Irecv(p, bytes, mpi->byte, msgs[i].peer, tag, mc->world, &req[r]);
			owner[r] = i;
			if (rc != 0)
				mpi_error_text(mpi, rc, detail, sizeof(detail));
		}
	}
	pthread_mutex_unlock(&mc->lock);
	double deadline = now_seconds() + c->timeout_seconds;
	int64_t pending = detail[0] ? 0 : num_req;
	for (long spins = 0; pending > 0 && !detail[0]; spins++) {
		pthread_mutex_lock(&mc->lock);
		for (int64_t i = 0; i < num_req && !detail[0]; i++) {
			int flag = 0, rc;
			if (done[i])
				continue;
			rc = mpi->Test(&req[i], &flag, NULL);
			if (rc != 0) {
				char text[300];
				mpi_error_text(mpi, rc, text, sizeof(text));
				snprintf(detail, sizeof(detail), "with rank %d: %s", msgs[owner[i]].peer, text);
			} else if (flag) {
				done[i] = 1;
				pending--;
			}
		}
		pthread_mutex_unlock(&mc->lock);
		if (pending > 0 && !detail[0] && now_seconds() > deadline) {
			int len = snprintf(detail, sizeof(detail), "no answer within %g s from rank", c->timeout_seconds);
			int last = -1;
			for (int64_t i = 0; i < num_req; i++)
				if (!done[i] && msgs[owner[i]].peer != last && len < (int)sizeof(detail) - 16) {
					last = msgs[owner[i]].peer;
					len += snprintf(detail + len, sizeof(detail) - (size_t)len, " %d", last);
				}
			snprintf(detail + len, sizeof(detail) - (size_t)len, " (lost or hung)");
		}
		if (pending > 0 && spins > 100) { /* first spin (fast peers), then yield the core */
			struct timespec ts = {0, spins > 10000 ? 1000000 : 50000};
			nanosleep(&ts, NULL);
		}
	}
	free(req), free(owner), free(done);
	return detail[0] ? fail(mc, "%s: %s", what, detail) : DATAFLOW_OK;
}

/* Part r of an array of count elements: [off[r], off[r] + len[r]). */
static void split(int64_t count, int n, int64_t *off, int64_t *len)
{
	int64_t base = count / n, rem = count % n;
	for (int r = 0; r < n; r++) {
		len[r] = base + (r < rem);
		off[r] = r * base + (r < rem ? r : rem);
	}
}

/* Rank me receives every rank's part me of send, and writes their rank-order reduction to out. */
static Dataflow_Status reduce_parts(Dataflow_Comm *c, const Collective *k, const int64_t *off, const int64_t *len,
				    void *out, int tag, const char *what)
{
	int n = c->size, me = c->rank;
	size_t es = dataflow_datatype_size(k->dtype);
	char *tmp = malloc((size_t)(n * len[me]) * es + 1);
	Message *msgs = calloc((size_t)(2 * n), sizeof(Message));
	const void **srcs = calloc((size_t)n, sizeof(void *));
	Dataflow_Status st = DATAFLOW_OK;
	if (!tmp || !msgs || !srcs)
		st = dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory for %lld received elements", what,
					(long long)(n * len[me]));
	int m = 0;
	for (int p = 0; p < n && st == DATAFLOW_OK; p++) {
		srcs[p] = p == me ? (const char *)k->send + off[me] * (int64_t)es : tmp + (size_t)(p * len[me]) * es;
		if (p == me)
			continue;
		msgs[m++] = (Message){p, 0, (void *)srcs[p], len[me] * (int64_t)es};
		msgs[m++] = (Message){p, 1, (char *)k->send + off[p] * (int64_t)es, len[p] * (int64_t)es};
	}
	if (st == DATAFLOW_OK)
		st = exchange(c, msgs, m, tag, what);
	if (st == DATAFLOW_OK)
		rank_order_reduce(k->dtype, srcs, n, len[me], out, k->op);
	free(tmp), free(msgs), free(srcs);
	return st;
}

/* Every rank sends its part of buf to every other and receives theirs in place. */
static Dataflow_Status gather_parts(Dataflow_Comm *c, DataflowDatatype dtype, void *buf, const int64_t *off,
				    const int64_t *len, int tag, const char *what)
{
	int n = c->size, me = c->rank;
	int64_t es = (int64_t)dataflow_datatype_size(dtype);
	Message *msgs = calloc((size_t)(2 * n), sizeof(Message));
	if (!msgs)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory", what);
	int m = 0;
	for (int p = 0; p < n; p++) {
		if (p == me)
			continue;
		msgs[m++] = (Message){p, 0, (char *)buf + off[p] * es, len[p] * es};
		msgs[m++] = (Message){p, 1, (char *)buf + off[me] * es, len[me] * es};
	}
	Dataflow_Status st = exchange(c, msgs, m, tag, what);
	free(msgs);
	return st;
}

static Dataflow_Status broadcast(Dataflow_Comm *c, const Collective *k, int tag, const char *what)
{
	int64_t bytes = k->count * (int64_t)dataflow_datatype_size(k->dtype);
	Message *msgs = calloc((size_t)c->size, sizeof(Message));
	if (!msgs)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory", what);
	int m = 0;
	for (int p = 0; p < c->size; p++)
		if (p != c->rank && (c->rank == k->root || p == k->root))
			msgs[m++] = (Message){p, c->rank == k->root, k->recv, bytes};
	Dataflow_Status st = exchange(c, msgs, m, tag, what);
	free(msgs);
	return st;
}

static Dataflow_Status run_collective(Dataflow_Comm *c, const Collective *k, uint64_t seq)
{
	Mpi_Comm *mc = c->ctx;
	char what[64];
	snprintf(what, sizeof(what), "%s #%llu (rank %d of %d)", collective_name(k->kind), (unsigned long long)seq,
		 c->rank, c->size);
	pthread_mutex_lock(&mc->lock);
	int broken = mc->failure[0] != 0;
	pthread_mutex_unlock(&mc->lock);
	if (broken)
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "%s: the communicator failed earlier: %s", what,
					  mc->failure);
	int tag = 2 * (int)(seq % TAG_SEQUENCES);
	if (k->kind == COLL_BROADCAST)
		return broadcast(c, k, tag, what);
	int n = c->size;
	int64_t es = (int64_t)dataflow_datatype_size(k->dtype);
	int64_t *off = calloc((size_t)(2 * n), sizeof(int64_t)), *len = off + n;
	if (!off)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "%s: no memory", what);
	if (k->kind == COLL_ALL_REDUCE)
		split(k->count, n, off, len);
	else
		for (int r = 0; r < n; r++)
			off[r] = r * k->count, len[r] = k->count;
	Dataflow_Status st = DATAFLOW_OK;
	switch (k->kind) {
	case COLL_ALL_REDUCE:
		st = reduce_parts(c, k, off, len, (char *)k->recv + off[c->rank] * es, tag, what);
		if (st == DATAFLOW_OK)
			st = gather_parts(c, k->dtype, k->recv, off, len, tag + 1, what);
		break;
	case COLL_REDUCE_SCATTER:
		st = reduce_parts(c, k, off, len, k->recv, tag, what);
		break;
	default: /* COLL_ALL_GATHER */
		memmove((char *)k->recv + off[c->rank] * es, k->send, (size_t)(k->count * es));
		st = gather_parts(c, k->dtype, k->recv, off, len, tag + 1, what);
		break;
	}
	free(off);
	return st;
}

static Dataflow_Status run_op(Dataflow_Handle *h, int stream_id, const Op *op, void *state)
{
	(void)h, (void)stream_id;
	Dataflow_Comm *c = ((Op_Slot *)state)->comm;
	if (!c)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "collective: its communicator was destroyed");
	Collective k = {*(int32_t *)op->op_args[A_KIND], *(int32_t *)op->op_args[A_DTYPE], *(int64_t *)op->op_args[A_COUNT],
			*(void **)op->op_args[A_SEND], *(void **)op->op_args[A_RECV], *(int32_t *)op->op_args[A_OP],
			*(int32_t *)op->op_args[A_ROOT]};
	return run_collective(c, &k, *(uint64_t *)op->op_args[A_SEQ]);
}

static Dataflow_Status mpi_submit(Dataflow_Comm *c, int stream_id, const Collective *k)
{
	Mpi_Comm *mc = c->ctx;
	int32_t kind = k->kind, dtype = k->dtype, rop = k->op, root = k->root;
	int64_t count = k->count;
	uint64_t seq = __atomic_fetch_add(&mc->next_seq, 1, __ATOMIC_SEQ_CST);
	const void *send = k->send;
	void *recv = k->recv;
	Op op = {.skeleton = mc->skeleton,
		 .op_args = {(void *)&send, &recv, &kind, &dtype, &count, &rop, &root, &seq}};
	return dataflow_submit_op(c->handle, &op, stream_id);
}

static Dataflow_Status mpi_create(Dataflow_Comm *c, const Dataflow_Comm_Config *config)
{
	static uint64_t next_id;
	Mpi_Comm *mc = calloc(1, sizeof(*mc));
	Op_Slot *slot = calloc(1, sizeof(*slot));
	if (!mc || !slot) {
		free(mc), free(slot);
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "comm_create: no memory");
	}
	Dataflow_Status st = mpi_library_acquire(config->library, &mc->mpi);
	if (st != DATAFLOW_OK) {
		free(mc), free(slot);
		return st;
	}
	const Mpi_Library *mpi = mc->mpi;
	int rc = mpi->Comm_dup(mpi->comm_world, &mc->world);
	if (rc == 0)
		rc = mpi->Comm_set_errhandler(mc->world, mpi->errors_return);
	if (rc == 0)
		rc = mpi->Comm_rank(mc->world, &c->rank);
	if (rc == 0)
		rc = mpi->Comm_size(mc->world, &c->size);
	if (rc != 0) {
		char text[400];
		mpi_error_text(mpi, rc, text, sizeof(text));
		st = dataflow_set_error(DATAFLOW_ERR_BACKEND, "comm_create: %s", text);
	}
	char name[DATAFLOW_MAX_OP_NICKNAME + 1];
	snprintf(name, sizeof(name), "collective.mpi.%llu",
		 (unsigned long long)__atomic_fetch_add(&next_id, 1, __ATOMIC_SEQ_CST));
	DataflowDatatype dts[NUM_ARGS] = {DATAFLOW_UINT8,        DATAFLOW_UINT8,        DATAFLOW_INT32_SCALAR,
					  DATAFLOW_INT32_SCALAR, DATAFLOW_INT64_SCALAR, DATAFLOW_INT32_SCALAR,
					  DATAFLOW_INT32_SCALAR, DATAFLOW_UINT64_SCALAR};
	if (st == DATAFLOW_OK)
		st = dataflow_op_skeleton_init(&mc->skeleton, name, NUM_ARGS, dts);
	Dataflow_Op_State state = {slot, free};
	if (st == DATAFLOW_OK)
		st = dataflow_register_external_func(c->handle, &mc->skeleton, run_op, &state, NULL, 0);
	if (st != DATAFLOW_OK) {
		if (mc->world)
			mpi->Comm_free(&mc->world);
		mpi_library_release(1);
		free(mc), free(slot);
		return st;
	}
	pthread_mutex_init(&mc->lock, NULL);
	slot->comm = c;
	mc->slot = slot;
	c->ctx = mc;
	return DATAFLOW_OK;
}

static void mpi_destroy(Dataflow_Comm *c)
{
	Mpi_Comm *mc = c->ctx;
	int healthy = !mc->failure[0];
	mc->slot->comm = NULL;
	if (healthy)
		mc->mpi->Comm_free(&mc->world);
	pthread_mutex_destroy(&mc->lock);
	free(mc);
	mpi_library_release(healthy);
}

const Comm_Transport comm_mpi_transport = {"mpi", mpi_create, mpi_destroy, mpi_submit};
