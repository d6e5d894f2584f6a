#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* submit_op launches: a native kernel with cuLaunchKernel (which copies the argument values at
 * the call, so the caller may reuse its Op at once) after its launch function chose the grid,
 * an external op by calling it now on the caller's thread; it enqueues its library's work on
 * the stream, and its failure is this call's failure. A kernel that faults later is reported
 * by the stream's next sync, which names the ops submitted since the last one (the stream's op
 * log, cuda_fault.h). */

Dataflow_Status cuda_op_function(Cuda_Handle *h, Cuda_Op *op)
{
	Dataflow_Status st = DATAFLOW_OK;
	/* one compile per module, even when several threads submit its first ops at once; under
	 * the module's lock, so a long compile (attention_bwd.cu's 30 kernels) holds up only the
	 * ops of that file */
	Cuda_Module *m = op->module;
	pthread_mutex_lock(&m->lock);
	if (!m->module) {
		void *cubin = NULL;
		size_t size = 0;
		st = cuda_nvrtc_compile(m->name, m->source, m->include_dir, h->cc_major * 10 + h->cc_minor, &cubin, &size);
		if (st == DATAFLOW_OK) {
			char what[512];
			snprintf(what, sizeof(what), "cuModuleLoadData(%.400s)", m->name);
			st = cuda_check(h->cu->cuModuleLoadData(&m->module, cubin), h->handle->device_index, what);
		}
		free(cubin);
	}
	if (st == DATAFLOW_OK && !op->function) {
		char what[512];
		snprintf(what, sizeof(what), "cuModuleGetFunction(%s in %.300s)", op->kernel_name, m->name);
		st = cuda_check(h->cu->cuModuleGetFunction(&op->function, m->module, op->kernel_name),
				h->handle->device_index, what);
	}
	pthread_mutex_unlock(&m->lock);
	return st;
}

static Dataflow_Status launch_native(Cuda_Handle *h, Cuda_Op *rec, void *state, const Op *op, int stream_id)
{
	Dataflow_Launch_Config c = {{0, 0, 0}, {0, 0, 0}, 0, 1};
	DATAFLOW_TRY(rec->launch(h->handle, op, state, &c));
	if (c.grid[0] == 0)
		return DATAFLOW_OK; /* the launch function found nothing to do (n == 0) */
	for (int d = 0; d < 3; d++)
		if (c.grid[d] == 0 || c.block[d] == 0)
			return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
						  "op '%s': launch function chose grid (%u, %u, %u), block (%u, %u, %u); "
						  "every dimension must be >= 1",
						  op->skeleton.nickname, c.grid[0], c.grid[1], c.grid[2], c.block[0],
						  c.block[1], c.block[2]);
	DATAFLOW_TRY(cuda_op_function(h, rec));
	char what[sizeof(rec->kernel_name) + 32];
	snprintf(what, sizeof(what), "cuLaunchKernel(%s)", rec->kernel_name);
	return cuda_check_fault(h, h->cu->cuLaunchKernel(rec->function, c.grid[0], c.grid[1], c.grid[2], c.block[0],
							 c.block[1], c.block[2], c.shared_mem_bytes,
							 h->streams[stream_id].stream, (void **)op->op_args, NULL),
				what);
}

Dataflow_Status cuda_submit_op(Dataflow_Handle *h, int stream_id, const Op *op, const Dataflow_Op_Entry *entry)
{
	Cuda_Handle *ch = cuda_of(h);
	DATAFLOW_TRY(cuda_enter(ch, "submit_op"));
	Dataflow_Status st;
	if (entry->record) {
		st = launch_native(ch, entry->record, entry->state.data, op, stream_id);
	} else if ((st = entry->external(h, stream_id, op, entry->state.data)) != DATAFLOW_OK) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", dataflow_last_error());
		return dataflow_set_error(st, "external op '%s' failed: %s", op->skeleton.nickname, msg);
	}
	if (st == DATAFLOW_OK) {
		Cuda_Stream *s = &ch->streams[stream_id];
		pthread_mutex_lock(&s->lock);
		cuda_op_log_push(&s->ops, op->skeleton.nickname);
		pthread_mutex_unlock(&s->lock);
	}
	return st;
}
