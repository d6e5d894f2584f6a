#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

/* A stream is a worker thread draining a FIFO of tasks. `submitted` counts tasks queued,
 * `completed` tasks finished; a stream state is (stream, submitted at record time), and
 * waiting on it means waiting until that stream's `completed` reaches the value. */

static _Thread_local Host_Stream *current_stream;

Task *task_new(Task_Kind kind)
{
	Task *t = malloc(sizeof(*t));
	if (t) {
		t->next = NULL;
		t->kind = kind;
	}
	return t;
}

static void record_failure(Host_Stream *s, Dataflow_Status st, const char *message)
{
	pthread_mutex_lock(&s->lock);
	if (s->error == DATAFLOW_OK) {
		s->error = st;
		snprintf(s->error_message, sizeof(s->error_message), "stream %d: %.1000s", s->id, message);
	}
	pthread_mutex_unlock(&s->lock);
}

/* `submitted` and `completed` change under the stream's lock (atomically, so that spinning
 * threads may poll them without it). */
typedef struct {
	Host_Stream *stream;
	uint64_t value;
} Completion;

static int reached(void *arg)
{
	Completion *c = arg;
	return __atomic_load_n(&c->stream->completed, __ATOMIC_ACQUIRE) >= c->value;
}

/* Waits, with the stream's lock held, until its completed count reaches value. */
static void wait_completed_locked(Host_Stream *s, uint64_t value)
{
	if (s->completed >= value)
		return;
	Completion c = {s, value};
	pthread_mutex_unlock(&s->lock);
	host_spin_until(reached, &c);
	pthread_mutex_lock(&s->lock);
	while (s->completed < value)
		pthread_cond_wait(&s->done, &s->lock);
}

void stream_wait(Host_Stream *s, uint64_t value)
{
	pthread_mutex_lock(&s->lock);
	wait_completed_locked(s, value);
	pthread_mutex_unlock(&s->lock);
}

static void run_task(Host_Stream *s, Task *t)
{
	Host_Handle *h = s->handle;
	switch (t->kind) {
	case TASK_KERNEL:
		compute_pool_run(h->pool, t->u.kernel.kernel, t->op.op_args, t->u.kernel.num_parts);
		break;
	case TASK_EXTERNAL: {
		Dataflow_Status st = t->u.external.func(h->handle, s->id, &t->op, t->u.external.state);
		if (st != DATAFLOW_OK) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "external op '%s' failed: %s", t->op.skeleton.nickname,
				 dataflow_last_error());
			record_failure(s, st, msg);
		}
		break;
	}
	case TASK_HOST_FN:
		t->u.host_fn.func(t->u.host_fn.arg);
		break;
	case TASK_COPY:
		host_run_copy(h, t->u.copy.dst, t->u.copy.src, t->u.copy.size);
		break;
	case TASK_MEMSET:
		memset(t->u.memset.dst, t->u.memset.value, t->u.memset.size);
		break;
	case TASK_WAIT:
		stream_wait(t->u.wait.stream, t->u.wait.value);
		host_unref(t->u.wait.stream->handle);
		break;
	}
}

static int has_work(void *arg)
{
	Host_Stream *s = arg;
	/* only this worker advances `completed` */
	return __atomic_load_n(&s->submitted, __ATOMIC_ACQUIRE) > s->completed ||
	       __atomic_load_n(&s->shutdown, __ATOMIC_ACQUIRE);
}

static void *stream_main(void *arg)
{
	Host_Stream *s = arg;
	current_stream = s;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		if (!s->head && !s->shutdown) {
			/* more work usually follows soon: poll before sleeping */
			pthread_mutex_unlock(&s->lock);
			host_spin_until(has_work, s);
			pthread_mutex_lock(&s->lock);
		}
		while ((!s->head || s->inline_busy) && !s->shutdown)
			pthread_cond_wait(&s->work, &s->lock);
		if (!s->head)
			break; /* shutdown with an empty queue */
		Task *t = s->head;
		pthread_mutex_unlock(&s->lock);
		run_task(s, t);
		pthread_mutex_lock(&s->lock);
		s->head = t->next;
		if (!s->head)
			s->tail = NULL;
		__atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&s->done); /* no system call when nobody sleeps on it */
		free(t);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

Dataflow_Status stream_start(Host_Stream *s, Host_Handle *h, int id)
{
	memset(s, 0, sizeof(*s));
	s->handle = h;
	s->id = id;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->done, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
		pthread_cond_destroy(&s->work);
		pthread_cond_destroy(&s->done);
		pthread_mutex_destroy(&s->lock);
		return dataflow_set_error(DATAFLOW_ERR_BACKEND, "host handle: cannot start worker thread of stream %d",
					  id);
	}
	return DATAFLOW_OK;
}

void stream_stop(Host_Stream *s)
{
	pthread_mutex_lock(&s->lock);
	__atomic_store_n(&s->shutdown, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&s->work);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
}

void stream_free(Host_Stream *s)
{
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->done);
	pthread_mutex_destroy(&s->lock);
}

/* Whether t may run on the submitting thread: compute, or a copy or memset small enough to cost
 * less than a hand-off (never a throttled copy: it stands for a link the submitter does not wait
 * on), submitted from outside the handle's workers while none of its streams has work. Requiring
 * the whole handle to be idle keeps overlap where it is written: while a transfer or another
 * stream's work is in flight, new work queues as before. */
#define HOST_INLINE_MAX_BYTES (64u << 10)

static int may_run_inline(const Host_Stream *s, const Task *t)
{
	const Host_Handle *h = s->handle;
	if (current_stream)
		return 0;
	switch (t->kind) {
	case TASK_KERNEL:
	case TASK_EXTERNAL:
		break;
	case TASK_COPY:
		if (h->transfer_bytes_per_sec > 0 || t->u.copy.size > HOST_INLINE_MAX_BYTES)
			return 0;
		break;
	case TASK_MEMSET:
		if (t->u.memset.size > HOST_INLINE_MAX_BYTES)
			return 0;
		break;
	default: /* host functions and waits may block on what the caller does next */
		return 0;
	}
	for (int i = 0; i < h->num_streams; i++)
		if (__atomic_load_n(&h->streams[i].completed, __ATOMIC_ACQUIRE) !=
		    __atomic_load_n(&h->streams[i].submitted, __ATOMIC_ACQUIRE))
			return 0;
	return 1;
}

/* Runs t now on this thread as the stream's next task. The stream counts it submitted while it
 * runs (`inline_busy`), so tasks queued meanwhile wait behind it and syncs wait for it; this
 * thread acts as the stream's worker meanwhile (host_on_worker: no sync of the handle from
 * inside an external op, as on the worker). */
static void run_inline(Host_Stream *s, Task *t)
{
	current_stream = s;
	run_task(s, t);
	current_stream = NULL;
	pthread_mutex_lock(&s->lock);
	s->inline_busy = 0;
	__atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&s->done);
	if (s->head) /* the worker waits for this task to finish before the ones queued behind it */
		pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	free(t);
}

/* A handed-off task costs the worker's wake-up (5-30 us, milliseconds on a loaded machine), which
 * dominated a decode step's ~115 small ops: an idle handle's work runs on the submitter instead. */
void stream_enqueue(Host_Stream *s, Task *t)
{
	int now = may_run_inline(s, t);
	pthread_mutex_lock(&s->lock);
	if (now && !s->head && !s->inline_busy && s->completed == s->submitted) {
		s->inline_busy = 1;
		__atomic_store_n(&s->submitted, s->submitted + 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&s->lock);
		run_inline(s, t);
		return;
	}
	if (s->tail)
		s->tail->next = t;
	else
		s->head = t;
	s->tail = t;
	__atomic_store_n(&s->submitted, s->submitted + 1, __ATOMIC_RELEASE);
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
}

Dataflow_Status stream_sync(Host_Stream *s)
{
	if (current_stream == s)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "sync: stream %d cannot wait for itself from its own worker (this would "
					  "deadlock)",
					  s->id);
	pthread_mutex_lock(&s->lock);
	wait_completed_locked(s, s->submitted);
	Dataflow_Status st = s->error;
	char message[sizeof(s->error_message)];
	memcpy(message, s->error_message, sizeof(message));
	s->error = DATAFLOW_OK;
	pthread_mutex_unlock(&s->lock);
	if (st != DATAFLOW_OK)
		return dataflow_set_error(st, "%s", message);
	return DATAFLOW_OK;
}

int host_on_worker(Dataflow_Handle *h)
{
	return current_stream && current_stream->handle == host_of(h);
}

/* Events are counts of tasks: event v of a stream is done once v of its tasks have run. */
Dataflow_Status host_record_event(Dataflow_Handle *h, int stream_id, uint64_t *event)
{
	*event = __atomic_load_n(&host_of(h)->streams[stream_id].submitted, __ATOMIC_ACQUIRE);
	return DATAFLOW_OK;
}

int host_query_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	return __atomic_load_n(&host_of(h)->streams[stream_id].completed, __ATOMIC_ACQUIRE) >= event;
}

Dataflow_Status host_wait_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	stream_wait(&host_of(h)->streams[stream_id], event);
	return DATAFLOW_OK;
}

/* The wait task holds a reference on the other handle's context, so it can run after that
 * handle is destroyed (whose streams have finished all work by then). */
Dataflow_Status host_submit_dependency(Dataflow_Handle *h, int stream_id, Dataflow_Handle *other, int other_stream_id,
				       uint64_t event)
{
	Task *t = task_new(TASK_WAIT);
	if (!t)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_dependency: no memory for a task");
	t->u.wait.stream = &host_of(other)->streams[other_stream_id];
	t->u.wait.value = event;
	host_ref(host_of(other));
	stream_enqueue(&host_of(h)->streams[stream_id], t);
	return DATAFLOW_OK;
}

Dataflow_Status host_sync_stream(Dataflow_Handle *h, int stream_id)
{
	return stream_sync(&host_of(h)->streams[stream_id]);
}
