#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"

/* Streams map 1:1 to CUstreams (non-blocking: the legacy default stream orders nothing).
 *
 * Stream states. Dataflow_Stream_State is a plain value the caller owns and may copy, keep
 * or drop, so it cannot own a CUevent. Each stream instead owns a ring of CUDA_EVENT_RING
 * events: get_stream_state hands out value v = ++recorded and records events[v % RING]; a
 * dependency on (stream, v) waits on that event. The event is re-recorded by state
 * v + RING, so a state stays usable for the next RING - 1 states recorded on its stream;
 * an older one fails with a message saying so (never a silent wrong wait). A wait already
 * submitted is unaffected by later re-recording (cuStreamWaitEvent captures the event's
 * state at the call). States work across handles (events are waited on from another
 * context of the same or another device); the recording handle must outlive their use. */

_Thread_local int cuda_in_host_fn;

Dataflow_Status cuda_streams_create(Cuda_Handle *h, const int *priorities)
{
	int least = 0, greatest = 0;
	int wanted = h->base.num_streams;
	h->base.num_streams = 0;
	Dataflow_Status st = cuda_check(h->cu->cuCtxGetStreamPriorityRange(&least, &greatest), h->base.device_index,
					"cuCtxGetStreamPriorityRange");
	for (int i = 0; i < wanted && st == DATAFLOW_OK; i++) {
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
				h->base.device_index, what);
		if (st == DATAFLOW_OK) {
			pthread_mutex_init(&s->lock, NULL);
			h->base.num_streams = i + 1;
		}
	}
	return st;
}

void cuda_streams_destroy(Cuda_Handle *h)
{
	for (int i = 0; i < h->base.num_streams; i++) {
		Cuda_Stream *s = &h->streams[i];
		for (int j = 0; j < CUDA_EVENT_RING; j++)
			if (s->events[j])
				h->cu->cuEventDestroy(s->events[j]);
		h->cu->cuStreamDestroy(s->stream);
		pthread_mutex_destroy(&s->lock);
	}
	h->base.num_streams = 0;
}

Dataflow_Status cuda_get_stream_state(Dataflow_Handle *h, int stream_id, Dataflow_Stream_State *state)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, stream_id, "get_stream_state");
	if (st != DATAFLOW_OK)
		return st;
	if (!state)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "get_stream_state: state pointer is NULL");
	Cuda_Stream *s = &ch->streams[stream_id];
	pthread_mutex_lock(&s->lock);
	uint64_t v = s->recorded + 1;
	CUevent *ev = &s->events[v % CUDA_EVENT_RING];
	if (!*ev)
		st = cuda_check(ch->cu->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING), h->device_index, "cuEventCreate");
	if (st == DATAFLOW_OK)
		st = cuda_check(ch->cu->cuEventRecord(*ev, s->stream), h->device_index, "cuEventRecord");
	if (st == DATAFLOW_OK)
		s->recorded = v;
	pthread_mutex_unlock(&s->lock);
	if (st != DATAFLOW_OK)
		return st;
	state->backend = cuda_backend_tag;
	state->stream = s;
	state->value = v;
	return DATAFLOW_OK;
}

Dataflow_Status cuda_submit_dependency(Dataflow_Handle *h, int stream_id, const Dataflow_Stream_State *state)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, stream_id, "submit_dependency");
	if (st != DATAFLOW_OK)
		return st;
	if (!state || !state->stream)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: state is NULL or was never recorded");
	if (state->backend != cuda_backend_tag)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "submit_dependency: state was recorded by another backend, expected cuda");
	Cuda_Stream *self = &ch->streams[stream_id], *other = state->stream;
	if (other == self)
		return DATAFLOW_OK; /* stream order already guarantees it */
	pthread_mutex_lock(&other->lock);
	uint64_t v = state->value, recorded = other->recorded;
	if (v == 0 || v > recorded)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"submit_dependency: state %llu of stream %d was never recorded (the stream has "
					"handed out %llu states)",
					(unsigned long long)v, other->id, (unsigned long long)recorded);
	else if (recorded - v >= CUDA_EVENT_RING)
		st = dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					"submit_dependency: state %llu of stream %d is too old: its event was reused by "
					"state %llu (only the last %d states of a stream stay valid); record a fresh one",
					(unsigned long long)v, other->id, (unsigned long long)(v + CUDA_EVENT_RING),
					CUDA_EVENT_RING);
	else
		st = cuda_check(ch->cu->cuStreamWaitEvent(self->stream, other->events[v % CUDA_EVENT_RING], 0),
				h->device_index, "cuStreamWaitEvent");
	pthread_mutex_unlock(&other->lock);
	return st;
}

Dataflow_Status cuda_sync_stream(Dataflow_Handle *h, int stream_id)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, stream_id, "sync_stream");
	if (st != DATAFLOW_OK)
		return st;
	Cuda_Stream *s = &ch->streams[stream_id];
	CUresult r = ch->cu->cuStreamSynchronize(s->stream);
	char ops[640], what[768];
	pthread_mutex_lock(&s->lock);
	if (r == CUDA_SUCCESS)
		cuda_op_log_clear(&s->ops);
	else
		cuda_op_log_describe(&s->ops, ops, sizeof(ops));
	pthread_mutex_unlock(&s->lock);
	if (r == CUDA_SUCCESS)
		return DATAFLOW_OK;
	snprintf(what, sizeof(what), "stream %d: cuStreamSynchronize found a failure of %s", stream_id, ops);
	return cuda_check_fault(ch, r, what);
}

Dataflow_Status cuda_sync_handle(Dataflow_Handle *h)
{
	Dataflow_Status first = DATAFLOW_OK;
	char message[1024] = "";
	for (int i = 0; i < h->num_streams; i++) {
		Dataflow_Status st = cuda_sync_stream(h, i);
		if (st != DATAFLOW_OK && first == DATAFLOW_OK) {
			first = st;
			snprintf(message, sizeof(message), "%s", dataflow_last_error());
		}
	}
	return first == DATAFLOW_OK ? DATAFLOW_OK : dataflow_set_error(first, "%s", message);
}

typedef struct {
	Dataflow_Host_Fn func;
	void *arg;
} Host_Call;

static void run_host_call(void *data)
{
	Host_Call call = *(Host_Call *)data;
	free(data);
	cuda_in_host_fn = 1;
	call.func(call.arg);
	cuda_in_host_fn = 0;
}

Dataflow_Status cuda_submit_host_op(Dataflow_Handle *h, Dataflow_Host_Fn func, void *arg, int stream_id)
{
	Cuda_Handle *ch = cuda_of(h);
	Dataflow_Status st = cuda_enter(ch, stream_id, "submit_host_op");
	if (st != DATAFLOW_OK)
		return st;
	if (!func)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "submit_host_op: function is NULL");
	Host_Call *call = malloc(sizeof(*call));
	if (!call)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "submit_host_op: no memory");
	*call = (Host_Call){func, arg};
	st = cuda_check(ch->cu->cuLaunchHostFunc(ch->streams[stream_id].stream, run_host_call, call), h->device_index,
			"cuLaunchHostFunc");
	if (st != DATAFLOW_OK)
		free(call);
	return st;
}
