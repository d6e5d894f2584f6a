#ifndef DATAFLOW_COMM_INTERNAL_H
#define DATAFLOW_COMM_INTERNAL_H

/* Private to libdataflowcomm: a communicator is a transport (MPI now, NCCL later) behind one
 * interface; comm.c checks every call once, then hands the transport a checked Collective. */

#include "dataflow/comm.h"

#define COMM_INTERNAL __attribute__((visibility("hidden")))

typedef enum { COLL_ALL_REDUCE = 0, COLL_REDUCE_SCATTER = 1, COLL_ALL_GATHER = 2, COLL_BROADCAST = 3 } Collective_Kind;

/* count: all_reduce and broadcast the whole array; reduce_scatter and all_gather one rank's part. */
typedef struct {
	Collective_Kind kind;
	DataflowDatatype dtype;
	int64_t count;
	const void *send;
	void *recv; /* broadcast: the buffer */
	Dataflow_Reduce_Op op;
	int root;
} Collective;

typedef struct Comm_Transport {
	const char *name;
	/* joins the job: sets comm->rank, comm->size, comm->ctx */
	Dataflow_Status (*create)(Dataflow_Comm *comm, const Dataflow_Comm_Config *config);
	void (*destroy)(Dataflow_Comm *comm);
	/* queues one checked collective on the bound handle's stream */
	Dataflow_Status (*submit)(Dataflow_Comm *comm, int stream_id, const Collective *coll);
} Comm_Transport;

struct Dataflow_Comm {
	const Comm_Transport *transport;
	void *ctx;
	Dataflow_Handle *handle;
	int rank, size;
	double timeout_seconds;
};

COMM_INTERNAL extern const Comm_Transport comm_mpi_transport;

const char *collective_name(Collective_Kind kind);

/* out[i] = the sum over r = 0..n-1, in that order, of srcs[r][i] (divided by n for AVG), for
 * i < count; fp32 and fp64 in their own precision, bf16 through fp32 rounded once. out may be
 * one of srcs. */
COMM_INTERNAL void rank_order_reduce(DataflowDatatype dtype, const void *const *srcs, int n, int64_t count, void *out,
				     Dataflow_Reduce_Op op);

#endif
