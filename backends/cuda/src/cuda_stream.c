#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"

/* Streams map 1:1 to CUstreams (non-blocking: the legacy default stream orders nothing).
 *
 * Events. The backend's events (libdataflow's stream states and the ledger's frees) are values
 * v = 1, 2, ... per stream; each stream owns a ring of CUDA_EVENT_RING CUevents and event v
 * records events[v % RING]. The CUevent is re-recorded by event v + RING, so:
 * - a dependency on v needs no wait once v is done (known from a query, a host wait or a sync,
 *   or because the slot's later record is done); otherwise it is refused once that happened
 *   (the wait would be on later work than asked: never a silent wrong wait, and no cycle it
 *   could close); a wait already submitted is unaffected (cuStreamWaitEvent captures the
 *   event's state at the call);
 * - a query or host wait of v uses the slot's latest record, a point at or after v: done
 *   means v is done, and waiting for it waits no less than asked.
 * Dependencies work across handles (an event is waited on from another context of the same
 * or another device); a destroyed handle's CUevents are released by the driver once the work
 * waiting on them no longer needs them (cuEventDestroy does not wait). */

_Thread_local Cuda_Handle *cuda_host_fn_handle;

Dataflow_Status cuda_streams_create(Cuda_Handle *h, int num_streams, const int *priorities)
{
	int least = 0, greatest = 0;
	Dataflow_Status st = cuda_check(h->cu->cuCtxGetStreamPriorityRange(&least, &greatest), h->handle->device_index,
					"cuCtxGetStreamPriorityRange");
	for (int i = 0; i < num_streams && st == DATAFLOW_OK; i++) {
		/* config: larger = more urgent, 0 = normal; CUDA: numerically lower = more urgent,
		 * in [greatest, least]. Priority p maps to least - p, clamped to the range. */
		long p = priorities ? (long)least - priorities[i] : least;
		p = p < greatest ? greatest : p > least ? least : p;
		Cuda_Stream *s = &h->streams[i];
		s->handle = h;
		s->id = i;
		char what[64];
		snprintf(what, sizeof(what), "cuStreamCreateWithPriority(stream %d)", i);
		st = cuda_check(h->cu->cuStreamCreateWithPriority(&s->stream, CU_STREAM_NON_BLOCKING, (int)p),
				h->handle->device_index, what);
		if (st == DATAFLOW_OK) {
			pthread_mutex_init(&s->lock, NULL);
			h->num_streams = i + 1;
		}
	}
	return st;
}

void cuda_streams_destroy(Cuda_Handle *h)
{
	for (int i = 0; i < h->num_streams; i++) {
		Cuda_Stream *s = &h->streams[i];
		for (int j = 0; j < CUDA_EVENT_RING; j++)
			if (s->events[j])
				h->cu->cuEventDestroy(s->events[j]);
		h->cu->cuStreamDestroy(s->stream);
		pthread_mutex_destroy(&s->lock);
	}
	h->num_streams = 0;
}

Dataflow_Status cuda_record_event(Dataflow_Handle *h, int stream_id, uint64_t *event)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "record event"));
	Cuda_Stream *s = &ch->streams[stream_id];
	pthread_mutex_lock(&s->lock);
	uint64_t v = s->recorded + 1;
	CUevent *ev = &s->events[v % CUDA_EVENT_RING];
	Dataflow_Status st = DATAFLOW_OK;
	if (!*ev)
		st = cuda_check(ch->cu->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING), h->device_index, "cuEventCreate");
	if (st == DATAFLOW_OK)
		st = cuda_check(ch->cu->cuEventRecord(*ev, s->stream), h->device_index, "cuEventRecord");
	if (st == DATAFLOW_OK)
		s->recorded = v;
	pthread_mutex_unlock(&s->lock);
	*event = v;
	return st;
}

int cuda_query_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	Cuda_Handle *ch = cuda_of(h);
	Cuda_Stream *s = &ch->streams[stream_id];
	pthread_mutex_lock(&s->lock);
	int done = event <= s->done;
	if (!done && event <= s->recorded && cuda_enter(ch, "query event") == DATAFLOW_OK &&
	    ch->cu->cuEventQuery(s->events[event % CUDA_EVENT_RING]) == CUDA_SUCCESS) {
		s->done = cuda_slot_latest(event, s->recorded);
		done = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}

Dataflow_Status cuda_wait_event(Dataflow_Handle *h, int stream_id, uint64_t event)
{
	Cuda_Handle *ch = cuda_of(h);
	Cuda_Stream *s = &ch->streams[stream_id];
	DATAFLOW_TRY(cuda_enter(ch, "wait for event"));
	pthread_mutex_lock(&s->lock);
	CUevent ev = event <= s->done || event > s->recorded ? NULL : s->events[event % CUDA_EVENT_RING];
	uint64_t latest = ev ? cuda_slot_latest(event, s->recorded) : 0;
	pthread_mutex_unlock(&s->lock);
	if (!ev)
		return DATAFLOW_OK;
	/* outside the lock: recording on the stream must not wait for the device */
	Dataflow_Status st = cuda_check(ch->cu->cuEventSynchronize(ev), h->device_index, "cuEventSynchronize");
	pthread_mutex_lock(&s->lock);
	if (st == DATAFLOW_OK && latest > s->done)
		s->done = latest;
	pthread_mutex_unlock(&s->lock);
	return st;
}

Dataflow_Status cuda_submit_dependency(Dataflow_Handle *h, int stream_id, Dataflow_Handle *other, int other_stream_id,
				       uint64_t event)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "submit_dependency"));
	Cuda_Stream *self = &ch->streams[stream_id], *s = &cuda_of(other)->streams[other_stream_id];
	pthread_mutex_lock(&s->lock);
	uint64_t recorded = s->recorded;
	CUevent slot = event ? s->events[event % CUDA_EVENT_RING] : NULL;
	Dataflow_Status st = DATAFLOW_OK;
	switch (cuda_dependency_of(event, recorded, s->done)) {
	case CUDA_DEP_NEVER_RECORDED:
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"submit_dependency: state %llu of stream %d was never recorded (the stream has "
					"handed out %llu states)",
					(unsigned long long)event, other_stream_id, (unsigned long long)recorded);
		break;
	case CUDA_DEP_DONE:
		break;
	case CUDA_DEP_WAIT:
		st = cuda_check(ch->cu->cuStreamWaitEvent(self->stream, slot, 0), h->device_index, "cuStreamWaitEvent");
		break;
	case CUDA_DEP_ASK_SLOT:
		if (ch->cu->cuEventQuery(slot) == CUDA_SUCCESS) {
			s->done = cuda_slot_latest(event, recorded);
			break;
		}
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"submit_dependency: state %llu of stream %d is too old: it may still be running "
					"and its event was reused by state %llu (only the last %d states of a stream can "
					"be waited on); record a fresh one",
					(unsigned long long)event, other_stream_id,
					(unsigned long long)(event + CUDA_EVENT_RING), CUDA_EVENT_RING);
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

Dataflow_Status cuda_sync_stream(Dataflow_Handle *h, int stream_id)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "sync_stream"));
	Cuda_Stream *s = &ch->streams[stream_id];
	pthread_mutex_lock(&s->lock);
	const uint64_t before = s->recorded; /* recorded before the sync: done after it */
	pthread_mutex_unlock(&s->lock);
	CUresult r = ch->cu->cuStreamSynchronize(s->stream);
	char ops[640], what[768];
	pthread_mutex_lock(&s->lock);
	if (r == CUDA_SUCCESS) {
		cuda_op_log_clear(&s->ops);
		if (before > s->done)
			s->done = before;
	}
	else
		cuda_op_log_describe(&s->ops, ops, sizeof(ops));
	pthread_mutex_unlock(&s->lock);
	if (r == CUDA_SUCCESS)
		return DATAFLOW_OK;
	snprintf(what, sizeof(what), "stream %d: cuStreamSynchronize found a failure of %s", stream_id, ops);
	return cuda_check_fault(ch, r, what);
}

typedef struct {
	Cuda_Handle *handle;
	Dataflow_Host_Fn func;
	void *arg;
} Host_Call;

static void run_host_call(void *data)
{
	Host_Call call = *(Host_Call *)data;
	free(data);
	cuda_host_fn_handle = call.handle;
	call.func(call.arg);
	cuda_host_fn_handle = NULL;
}

Dataflow_Status cuda_submit_host_op(Dataflow_Handle *h, int stream_id, Dataflow_Host_Fn func, void *arg)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "submit_host_op"));
	Host_Call *call = malloc(sizeof(*call));
	if (!call)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_host_op: no memory");
	*call = (Host_Call){ch, func, arg};
	Dataflow_Status st = cuda_check(ch->cu->cuLaunchHostFunc(ch->streams[stream_id].stream, run_host_call, call),
					h->device_index, "cuLaunchHostFunc");
	if (st != DATAFLOW_OK)
		free(call);
	return st;
}
