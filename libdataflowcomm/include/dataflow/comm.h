#ifndef DATAFLOW_COMM_H
#define DATAFLOW_COMM_H

#include <stdint.h>

#include "dataflow/handle.h"

/* libdataflowcomm: collectives between processes (ranks) as work on a stream.
 *
 * A communicator is the group of ranks started together (mpirun -n N) bound to ONE handle of
 * each rank: its collectives read and write that handle's device memory and run on one of its
 * streams, in stream order, ordered against other streams by events like any op. Every rank
 * must submit the same collectives in the same order (on any streams: they are matched by
 * their position in the communicator's sequence, not by stream).
 *
 * Transports (chosen by the handle's backend):
 *   host  MPI (Open MPI, libmpi.so.40), loaded with dlopen at dataflow_comm_create: nothing
 *         links against MPI, and a machine without it fails only here, with an error saying
 *         what to install. Each collective is an op on the stream (run by its worker).
 *   cuda  NCCL (not built yet: it slots in behind the same functions, enqueuing ncclAllReduce
 *         etc. on the stream's CUstream after a bootstrap of its unique id over MPI).
 *
 * Reductions are deterministic and the same bits on every rank: rank r reduces the r-th
 * part of the array by adding the ranks' contributions in rank order 0, 1, ..., N-1 (fp32 in
 * fp32, fp64 in fp64, bf16 through fp32 rounded once), then every rank receives every part.
 * So the result depends on N alone, never on the MPI library, its algorithm choice, message
 * sizes or timing, and a reduce-scatter gives exactly the parts of the all-reduce.
 *
 * Faults: a collective that waits longer than the timeout for a peer fails (the stream's
 * next sync reports it, naming the ranks that did not answer) and breaks the communicator:
 * later collectives fail at once instead of waiting for a rank that is gone. */

typedef struct Dataflow_Comm Dataflow_Comm;

typedef enum { DATAFLOW_REDUCE_SUM = 0, DATAFLOW_REDUCE_AVG = 1 } Dataflow_Reduce_Op;

typedef struct {
	/* the MPI library to load; NULL: $DATAFLOW_MPI_LIBRARY, else libmpi.so.40 */
	const char *library;
	/* seconds a collective waits for a peer before failing; 0: 300 */
	double timeout_seconds;
} Dataflow_Comm_Config;

/* Joins the ranks of this job (initializing MPI if nobody has) and binds the communicator to
 * handle. config may be NULL (defaults). */
Dataflow_Status dataflow_comm_create(Dataflow_Handle *handle, const Dataflow_Comm_Config *config,
				     Dataflow_Comm **comm);
/* Waits for the handle's queued work, then releases the communicator; the last one of the
 * process finalizes MPI when dataflow initialized it and no collective failed (a failed one
 * may wait forever for a lost rank). NULL: no-op. */
void dataflow_comm_destroy(Dataflow_Comm *comm);
int dataflow_comm_rank(const Dataflow_Comm *comm);
int dataflow_comm_size(const Dataflow_Comm *comm);

/* Collectives on the bound handle's stream. Reductions take fp32, fp64 or bf16; gathers and
 * broadcasts any tensor dtype. Pointers are device memory of the bound handle. */

/* recv[i] = sum (or mean) over ranks of send[i], i < count; send == recv is allowed. */
Dataflow_Status dataflow_submit_all_reduce(Dataflow_Comm *comm, int stream_id, DataflowDatatype dtype, int64_t count,
					   const void *send, void *recv, Dataflow_Reduce_Op op);
/* send [size * recv_count]; rank r receives the reduction of part r (send[r * recv_count ..]). */
Dataflow_Status dataflow_submit_reduce_scatter(Dataflow_Comm *comm, int stream_id, DataflowDatatype dtype,
					       int64_t recv_count, const void *send, void *recv, Dataflow_Reduce_Op op);
/* recv [size * send_count]: part r is rank r's send; send may be recv's own part. */
Dataflow_Status dataflow_submit_all_gather(Dataflow_Comm *comm, int stream_id, DataflowDatatype dtype,
					   int64_t send_count, const void *send, void *recv);
/* buf [count] of rank root is copied into buf of every rank. */
Dataflow_Status dataflow_submit_broadcast(Dataflow_Comm *comm, int stream_id, DataflowDatatype dtype, int64_t count,
					  void *buf, int root);

#endif
