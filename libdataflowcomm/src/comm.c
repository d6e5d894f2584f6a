/* The public communicator functions: each checks its arguments once (communicator, stream,
 * dtype, counts, the arrays against the bound handle's memory) and hands the transport a
 * Collective. */
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

const char *collective_name(Collective_Kind kind)
{
	static const char *const names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
	return names[kind];
}

Dataflow_Status dataflow_comm_create(Dataflow_Handle *handle, const Dataflow_Comm_Config *config, Dataflow_Comm **out)
{
	if (!out)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "comm_create: comm (the output) is NULL");
	*out = NULL;
	const char *backend = dataflow_handle_backend_name(handle);
	if (!backend)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "comm_create: handle is not an open handle");
	if (strcmp(backend, "host") != 0)
		return dataflow_set_error(DATAFLOW_ERR_UNSUPPORTED,
					  "comm_create: no collectives for the %s backend yet (host: MPI; cuda: NCCL is "
					  "planned)",
					  backend);
	Dataflow_Comm_Config defaults = {0};
	if (!config)
		config = &defaults;
	if (!(config->timeout_seconds >= 0))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "comm_create: timeout_seconds must be >= 0 (0: the default), got %g",
					  config->timeout_seconds);
	Dataflow_Comm *c = calloc(1, sizeof(*c));
	if (!c)
		return dataflow_set_error(DATAFLOW_ERR_OUT_OF_MEMORY, "comm_create: no memory");
	c->transport = &comm_mpi_transport;
	c->handle = handle;
	c->timeout_seconds = config->timeout_seconds > 0 ? config->timeout_seconds : 300.0;
	Dataflow_Status st = c->transport->create(c, config);
	if (st != DATAFLOW_OK) {
		free(c);
		return st;
	}
	*out = c;
	return DATAFLOW_OK;
}

void dataflow_comm_destroy(Dataflow_Comm *c)
{
	if (!c)
		return;
	dataflow_sync_handle(c->handle); /* its collectives' failures were the caller's to read */
	c->transport->destroy(c);
	free(c);
}

int dataflow_comm_rank(const Dataflow_Comm *c)
{
	return c ? c->rank : -1;
}

int dataflow_comm_size(const Dataflow_Comm *c)
{
	return c ? c->size : -1;
}

/* The checks every collective shares; send_elems / recv_elems: the arrays' lengths. */
static Dataflow_Status submit(Dataflow_Comm *c, int stream_id, const Collective *coll, int64_t send_elems,
			      int64_t recv_elems)
{
	const char *what = collective_name(coll->kind);
	if (!c)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: comm is NULL", what);
	size_t es = dataflow_datatype_size(coll->dtype);
	if (!dataflow_datatype_is_tensor(coll->dtype))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: dtype must be a tensor dtype, got %d", what,
					  (int)coll->dtype);
	int reduces = coll->kind == COLL_ALL_REDUCE || coll->kind == COLL_REDUCE_SCATTER;
	if (reduces && coll->dtype != DATAFLOW_FP32 && coll->dtype != DATAFLOW_FP64 && coll->dtype != DATAFLOW_BF16)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: dtype must be fp32, fp64 or bf16, got %s",
					  what, dataflow_datatype_name(coll->dtype));
	if (reduces && coll->op != DATAFLOW_REDUCE_SUM && coll->op != DATAFLOW_REDUCE_AVG)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "%s: op must be DATAFLOW_REDUCE_SUM (0) or DATAFLOW_REDUCE_AVG (1), got %d", what,
					  (int)coll->op);
	if (coll->count < 1 || coll->count > INT64_MAX / (int64_t)es / c->size)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: count must be >= 1 (and fit in memory), got %lld",
					  what, (long long)coll->count);
	if (stream_id < 0 || stream_id >= dataflow_handle_num_streams(c->handle))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "%s: stream %d out of range [0, %d)", what,
					  stream_id, dataflow_handle_num_streams(c->handle));
	Dataflow_Status st = DATAFLOW_OK;
	if (send_elems)
		st = dataflow_check_mem_range(c->handle, coll->send, (uint64_t)(send_elems * (int64_t)es), "send");
	if (st == DATAFLOW_OK)
		st = dataflow_check_mem_range(c->handle, coll->recv, (uint64_t)(recv_elems * (int64_t)es),
					      coll->kind == COLL_BROADCAST ? "buf" : "recv");
	if (st != DATAFLOW_OK)
		return dataflow_set_error(st, "%s: %s", what, dataflow_last_error());
	return c->transport->submit(c, stream_id, coll);
}

Dataflow_Status dataflow_submit_all_reduce(Dataflow_Comm *c, int stream_id, DataflowDatatype dtype, int64_t count,
					   const void *send, void *recv, Dataflow_Reduce_Op op)
{
	Collective coll = {COLL_ALL_REDUCE, dtype, count, send, recv, op, 0};
	return submit(c, stream_id, &coll, count, count);
}

Dataflow_Status dataflow_submit_reduce_scatter(Dataflow_Comm *c, int stream_id, DataflowDatatype dtype,
					       int64_t recv_count, const void *send, void *recv, Dataflow_Reduce_Op op)
{
	Collective coll = {COLL_REDUCE_SCATTER, dtype, recv_count, send, recv, op, 0};
	return submit(c, stream_id, &coll, c ? recv_count * c->size : 0, recv_count);
}

Dataflow_Status dataflow_submit_all_gather(Dataflow_Comm *c, int stream_id, DataflowDatatype dtype,
					   int64_t send_count, const void *send, void *recv)
{
	Collective coll = {COLL_ALL_GATHER, dtype, send_count, send, recv, DATAFLOW_REDUCE_SUM, 0};
	return submit(c, stream_id, &coll, send_count, c ? send_count * c->size : 0);
}

Dataflow_Status dataflow_submit_broadcast(Dataflow_Comm *c, int stream_id, DataflowDatatype dtype, int64_t count,
					  void *buf, int root)
{
	if (c && (root < 0 || root >= c->size))
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "broadcast: root %d out of range [0, %d)", root,
					  c->size);
	Collective coll = {COLL_BROADCAST, dtype, count, NULL, buf, DATAFLOW_REDUCE_SUM, root};
	return submit(c, stream_id, &coll, 0, count);
}
