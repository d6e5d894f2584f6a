#ifndef DATAFLOWRING_RING_EXEC_INTERNAL_H
#define DATAFLOWRING_RING_EXEC_INTERNAL_H

/* Private to libdataflowring: the executor's state, and the buffer tracks that order its
 * streams. */

#include "dataflow/comm.h"
#include "dataflow/ops.h"
#include "dataflow/ring_executor.h"

#define TRY(expr) DATAFLOW_TRY(expr)

/* RS_COMM: data-parallel sums; RS_DISK: the disk tier's reads and writes */
enum { RS_COMPUTE, RS_IN, RS_OUT, RS_OPT, RS_COMM, RS_DISK, RS_NUM };

typedef struct Ring_Disk Ring_Disk;

/* The last point of each stream that used a buffer (handle_id 0: none). A stream about to use
 * it waits for the other streams' points (track_before), then records its own (track_after). */
typedef struct {
	Dataflow_Stream_State use[RS_NUM];
} Track;

/* One block's memory. A kind's home is dev[kind] when set (the device holds the truth) else
 * host[kind]. train_param / train_grad: the device buffer training uses when it is fixed
 * (resident, or a resident copy of a host home); NULL: streamed through a slot or the edge
 * staging. */
typedef struct {
	int64_t numel;
	int64_t bytes[DATAFLOW_BLOCK_NUM_KINDS];
	void *dev[DATAFLOW_BLOCK_NUM_KINDS];
	void *host[DATAFLOW_BLOCK_NUM_KINDS];
	void *train_param, *train_grad;
	int param_stale; /* train_param is older than host[PARAM] (a host optimizer updated it) */
	Track dev_track[DATAFLOW_BLOCK_NUM_KINDS], host_track[DATAFLOW_BLOCK_NUM_KINDS];
} Ring_Block;

/* A layer's activations for one chunk, [x | saved], at a stride per chunk. */
typedef struct {
	int on_device;
	Dataflow_Save_Level level;
	int64_t stride;
	char *base; /* device or host: chunk c at base + c * stride */
	Track *tracks; /* host copies, per chunk */
	/* plan.kv_context: the round's keys and values [K * T, kvd] on the device (a layer that
	 * offloads: one of two K/V staging pairs, by layer parity, and a host mirror) */
	char *kv_k, *kv_v;
	Track *kv_tracks;          /* staging: per chunk, its rows (NULL: the layer's own, compute only) */
	char *host_k, *host_v;     /* offloading: the mirror */
	Track host_kv_track;
} Ring_Acts;

struct Dataflow_Ring_Executor {
	Dataflow_Handle *h;
	const Dataflow_Blocked_Model *model;
	Dataflow_Ring_Plan plan;
	int s[RS_NUM];
	int L, N;                /* layers, blocks */
	int64_t T, K, H, es;     /* chunk tokens, chunks per round, hidden size, bytes per element */
	int64_t kvd;             /* a token's key (or value) elements: num_kv_heads * head_dim */
	int tied, master;
	Dataflow_Optimizer_State state; /* how m and v are stored: the executor owns them unless fp32 */
	float *qmap;             /* 8-bit state: the signed and unsigned dynamic codes, device [2 * 256] */
	Ring_Block *blocks;
	Dataflow_Block_Memory *adopted; /* a resident model's block memory the executor trains in place (NULL: its own) */
	/* device */
	void *arena;
	uint64_t device_bytes, host_bytes;
	int W, G;
	void **wslot, **gslot;
	int *wslot_layer;        /* the layer each weight slot holds (-1: none or stale) */
	Track *wslot_track, *gslot_track;
	void *edge_stage;        /* [param | grad] of a non-resident edge block */
	int edge_stage_block;    /* whose param it holds (-1: none) */
	Track edge_track;
	Ring_Acts *acts;         /* per layer */
	void *stage[3];          /* offload staging */
	Track stage_track[3];
	Track *kv_stage_tracks[2]; /* K/V staging (kv_context and offloading): per chunk */
	int64_t stage_next;
	void **hid[2];           /* per chunk hidden states / gradients, two sets of K */
	Track *hid_track[2];
	void *recomputed, *dacts, *workspace, *head_saved;
	int32_t **dev_batch;
	Track *batch_track;
	float *ctx_dk, *ctx_dv;  /* plan.kv_context: a document's dK, dV [seq_len, kvd] fp32 */
	float *dev_losses;       /* [K * T] */
	Track losses_track;
	float *router_stats;     /* HF's load-balancing loss: a round's router statistics [2, E] (NULL: none), */
	float *router_loss;      /* its loss [1] and the call's mean over rounds [1] */
	Track router_track;
	void *grad_stage[2];     /* bf16 host gradients: [0] coming in (inbound only), [1] going home (outbound only) */
	void *opt_slot[2];       /* streamed optimizer */
	Track opt_track[2];
	void *norm_ws;
	double *sumsq;
	float *scale, *norm;
	Track scalars_track;
	Track train_region, opt_region; /* phase changes of the memory they share */
	/* host */
	void **host_allocs;
	int num_host_allocs;
	int32_t *host_batches;   /* [rounds * K] chunks of batch_numel */
	int batches_in_flight;   /* host_batches may still be read by inbound transfers (until a wait) */
	Track host_batch_track;
	int64_t batch_numel;
	float *host_losses;      /* [rounds * K * T] */
	float *host_norm;
	float *host_router_loss; /* the call's router loss (NULL: none) */
	int64_t last_chunks;
	Dataflow_Trace *trace;   /* the attached recorder (NULL: none) */
	Dataflow_Comm *comm;     /* data-parallel: gradients summed over its ranks (NULL: none) */
	int shard;               /* ZeRO-1: the optimizer state holds this rank's part of each block */
	int master_unset;        /* a sharded plan's master weights wait for the rank (set_comm) */
	Ring_Disk *disk;         /* the disk tier holding m and v (NULL: none) */
};

/* block b's AdamW step over mem on stream s, with m and v stored as the plan says */
Dataflow_Status ring_adamw(Dataflow_Ring_Executor *x, int b, int s, const Dataflow_Block_Memory *mem,
			   const Dataflow_AdamW_Params *params, const float *scale, int64_t step);

/* The disk tier (ring_disk.c). open: the file under disk->directory and the staging (after the
 * blocks' sizes are known, before host arrays: m, v and master get no host home). before(b): makes
 * blocks b (first block only) and b + 1 read into staging and points block b's host m and v at
 * its staging, the inbound and optimizer streams waiting for the read; after(b): writes block
 * b's back once the outbound and optimizer streams are done with it (with master weights, the
 * same for them). status: the first failure
 * of a read or write (a host op cannot return one). read/write_state: synchronous copies of a
 * block's m or v for dataflow_ring_executor_read / write. */
Dataflow_Status ring_disk_open(Dataflow_Ring_Executor *x, const Dataflow_Ring_Disk *disk);
void ring_disk_close(Dataflow_Ring_Executor *x);
int ring_disk_holds(const Dataflow_Ring_Executor *x, Dataflow_Block_Kind kind);
Dataflow_Status ring_disk_before(Dataflow_Ring_Executor *x, int b);
Dataflow_Status ring_disk_after(Dataflow_Ring_Executor *x, int b);
Dataflow_Status ring_disk_status(Dataflow_Ring_Executor *x);
Dataflow_Status ring_disk_copy(Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind, void *buffer, int write);
/* block b's master weights on disk set to the exact fp32 value of its bf16 parameters at param */
Dataflow_Status ring_disk_set_master(Dataflow_Ring_Executor *x, int b, const void *param);
/* Host gradients (ring_host_grads.c): block b's gradient as the host stores it (bf16 with
 * plan.host_gradients bf16, else fp32) and its bytes there; each staging buffer's bytes; g (fp32,
 * on the device) sent home (going_home) or its partial sum brought back into g, through the staging buffers
 * when narrowed; a host gradient read or written as fp32. */
int64_t ring_host_grad_bytes(const Dataflow_Ring_Executor *x, int b);
DataflowDatatype ring_grad_home_dtype(const Dataflow_Ring_Executor *x, int b);
int64_t ring_grad_stage_bytes(const Dataflow_Ring_Executor *x);
Dataflow_Status ring_grad_move(Dataflow_Ring_Executor *x, int b, void *g, Track *g_track, int going_home);
void ring_host_grad_read(const Dataflow_Ring_Executor *x, int b, float *dst);
void ring_host_grad_write(Dataflow_Ring_Executor *x, int b, const float *src);

/* Whether the optimizer's phase is fenced by barriers on both sides: a streamed optimizer's
 * slots are the training's memory, and ZeRO-1's weight gathers share the comm stream's order.
 * Otherwise the next step's uses of a block wait only for that block's update. */
static inline int ring_optimizer_fenced(const Dataflow_Ring_Executor *x)
{
	return x->plan.optimizer == DATAFLOW_RING_OPT_DEVICE_STREAMED || x->shard;
}

/* every stream waits for every other's queued work: phase changes of shared memory */
Dataflow_Status ring_barrier(Dataflow_Ring_Executor *x);
/* what the streamed optimizer brings into a slot for block b */
int64_t ring_opt_slot_bytes(const Dataflow_Ring_Executor *x, int b);
Dataflow_Status track_before(Dataflow_Ring_Executor *x, Track *t, int role);
Dataflow_Status track_after(Dataflow_Ring_Executor *x, Track *t, int role);

/* Data-parallel (ring_data_parallel.c): block b's final gradient g (device) summed over the
 * ranks on the comm stream (sharded: this rank's part reduce-scattered, the tail all-reduced);
 * with a sharded state, the squared global norm into x->sumsq (every rank's parts, summed over
 * the ranks) and block b's AdamW on this rank's part and the tail, then its weights gathered. */
Dataflow_Status ring_sum_grad(Dataflow_Ring_Executor *x, int b, void *g, Track *track);
Dataflow_Status ring_sharded_norm_sq(Dataflow_Ring_Executor *x);
Dataflow_Status ring_sharded_adamw(Dataflow_Ring_Executor *x, int b, const Dataflow_AdamW_Params *params,
				   const float *clip_scale, int64_t step);
/* A sharded executor's (plan.shard_ranks > 1) m or v of block b as a whole: read gathers every
 * rank's part into buffer (a collective: every rank reads), write keeps this rank's part and
 * the tail of it; both need the communicator (set_comm). */
Dataflow_Status ring_sharded_state_copy(Dataflow_Ring_Executor *x, int b, Dataflow_Block_Kind kind, void *buffer,
					int write);
/* A sharded executor's master weights of block b set to its parameters' part and tail (after a
 * write of the parameters; before set_comm the rank is not known: set_comm sets them then). */
Dataflow_Status ring_sharded_set_master(Dataflow_Ring_Executor *x, int b);

/* Tracing (ring_trace.c): a span of work on stream role opens (its start stamp queued) and
 * closes (its end stamp); *span is NULL, and nothing is queued, while not recording. */
Dataflow_Status ring_span_begin(Dataflow_Ring_Executor *x, int role, Dataflow_Ring_Work what, int block, int64_t chunk,
				uint64_t bytes, Dataflow_Trace_Span **span);
Dataflow_Status ring_span_end(Dataflow_Ring_Executor *x, Dataflow_Trace_Span *span);

static inline int64_t ring_align64(int64_t n)
{
	return (n + 63) / 64 * 64;
}

/* bytes of a chunk's hidden state [T, H], 64-byte aligned (x comes first in a layer's acts) */
static inline int64_t ring_x_bytes(const Dataflow_Ring_Executor *x, int64_t T)
{
	return ring_align64(T * x->H * x->es);
}

#endif
