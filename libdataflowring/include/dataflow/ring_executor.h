#ifndef DATAFLOW_RING_EXECUTOR_H
#define DATAFLOW_RING_EXECUTOR_H

#include <stdint.h>

#include "dataflow/blocked_model.h"
#include "dataflow/comm.h"
#include "dataflow/ring_plan.h"
#include "dataflow/trace.h"

/* The ring executor: trains a blocked model from a plan (ring_plan.h) on any backend, through
 * the public dataflow_* calls only.
 *
 * Optimizer state. m and v are stored as plan.optimizer_state says (fp32, bf16 or 8-bit: the
 * MOMENT kinds' bytes are dataflow_optimizer_state_bytes of the block's numel, and read/write
 * move those raw bytes); AdamW runs adamw_step, adamw_step_bf16_state (seeded by
 * Dataflow_AdamW_Params.seed and the block) or adamw_step_8bit (the dynamic codes).
 *
 * Memory. At create, ONE device allocation carved by purpose (the plan's memory map: resident
 * blocks or an edge staging buffer, weight and gradient slots, activations kept on the device,
 * offload staging, the chunk working set; the optimizer's phase memory overlaps the training's
 * when the plan streams the optimizer after the backward; its grad-norm scalars and workspace
 * are outside both) and host arrays for what lives on the
 * host (parameters, gradients, optimizer state, offloaded activations, batches, token losses),
 * each registered with the handle (dataflow_enable_access_to_host_mem). Every block's state has
 * one home, on the device or on the host; read/write below reach it wherever it is.
 *
 * Streams. compute, inbound (host -> device), outbound (device -> host) and optimizer (the
 * gradient norm, clipping and, for a host optimizer, AdamW over host memory) are ordered only by
 * events: each buffer remembers the last point of every stream that used it, and a stream about
 * to use it waits for the others'. accumulate and apply return once everything is enqueued.
 *
 * Order (blocked_model.h "How a ring drives it"): per round, layer-major over the round's
 * chunks; layer l + weight_slots is prefetched into the slot layer l frees, the last
 * weight_slots layers stay for the backward, whose freed slots take layers in reverse (so the
 * next round starts with layers 0.. in place); offloaded activations go out after each forward
 * and come back, through three staging buffers, before their backward; a layer's gradient is
 * zeroed or brought back (second round on) before its backward and sent home after it. Chunks
 * run in their order in the backward too, so every gradient sums its chunks in the order the
 * all-resident plan does when the same chunks are accumulated one call after another (the same
 * bits, for an untied model). The optimizer computes the global gradient norm over the blocks
 * in order 0..N-1, clips, and runs AdamW per block: in place on
 * the device (resident state), streamed through two optimizer slots (device, streamed or
 * overlapped), or over host memory (host). It starts after the backward; unless streamed
 * (fenced by barriers: its slots are the training's memory) or sharded, it ends without a
 * barrier and runs under the next accumulate's forward, block b's work waiting only for
 * block b's update (its gradient is zeroed at its first use, not at the call's start).
 *
 * Long sequences (plan.kv_context): a document longer than a chunk comes as consecutive chunks
 * (Dataflow_Ring_Chunk.past), all in one round (a round ends early rather than split one).
 * Each layer keeps the keys and values of every token of the round (a K and a V array of
 * K * T rows, a document's pieces at consecutive rows from its first chunk's) from its
 * forward, which writes them (blocked_model.h, Dataflow_Block_KV), to its backward, which reads
 * them as they are: nothing is rebuilt. A layer keeping its activations on the device has its
 * own arrays; layers that offload share two staging pairs by parity, each chunk's rows going to
 * a host copy after its forward and all of them coming back before the layer's backward
 * (ordered per chunk's rows, so one layer's move under the next layer's compute). The
 * backward runs a document's pieces in reverse (other chunks in order), accumulating dK/dV
 * in one fp32 pair of seq_len rows every layer and document reuses, zeroed before each. A
 * chunk neither continued nor continuing runs without context, as in any plan. */

typedef struct Dataflow_Ring_Executor Dataflow_Ring_Executor;

/* The four streams (ids of the handle; two roles may share one). */
typedef struct {
	int compute, inbound, outbound, optimizer;
} Dataflow_Ring_Streams;

/* One chunk of a step: a packed batch with labels in host memory (dataflow_batch_buffer_numel
 * layout), 1 <= num_tokens <= plan.chunk_tokens. past > 0: the chunk continues the document of
 * the chunk before it in the same call (plan.kv_context only; both num_docs 1), whose tokens
 * are that chunk's past + num_tokens; its positions continue from past and the previous
 * chunk's last label is this one's first token. A document's pieces (at most
 * plan.chunks_per_round, past + num_tokens <= plan.seq_len) run in one round. */
typedef struct {
	const int32_t *buffer;
	int64_t num_tokens, num_docs;
	int64_t past;  /* tokens of the chunk's document in the chunks before it; 0: it starts one */
} Dataflow_Ring_Chunk;

/* Checks that the plan is for this model (num_layers and model_param_bytes), allocates and
 * registers everything (m, v and gradients zeroed; parameters zero until written). streams
 * NULL: {0, 1, 2, 3}; ids may repeat (work sharing a stream runs in order, e.g. every
 * role on one stream of a one-stream handle). Errors: INVALID_ARGUMENT naming the mismatch, OUT_OF_MEMORY with the
 * bytes the plan needs against the capacity. */
Dataflow_Status dataflow_ring_executor_create(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
					      const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
					      Dataflow_Ring_Executor **executor);
/* As create, for an all-resident plan (dataflow_ring_plan_resident) over a resident model's own
 * block memory: blocks[b] (num_blocks entries: param, grad, m, v and, with master weights,
 * master) are the homes the executor trains and updates in place, keeping their values (nothing
 * is zeroed or copied; the caller keeps them allocated while the executor lives and frees them
 * after destroy). A plan with bf16 or 8-bit optimizer state: m and v are the executor's own
 * (zeroed, in its allocation; blocks' m and v are not used and may be NULL). Its device allocation is the training's scratch alone: activations, the chunk
 * working set, the optimizer's scalars. INVALID_ARGUMENT for a plan that is not all-resident or
 * a missing kind. */
Dataflow_Status dataflow_ring_executor_adopt(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
					     const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
					     const Dataflow_Block_Memory *blocks, Dataflow_Ring_Executor **executor);
/* The disk tier (plan.disk_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] > 0): the optimizer state
 * (m, v, and fp32 master weights when the plan keeps them) lives in one file under `directory`, a working copy made at create (unlinked at once,
 * so nothing outlives the executor or a crash; checkpoints read it through
 * dataflow_ring_executor_read). The optimizer's apply reads each block's state into one of two
 * aligned host staging buffers on `stream` (block b + 1's read runs while block b updates)
 * and writes it back after the update, both as host work on that stream ordered by events;
 * O_DIRECT where the file system allows it, else buffered (dataflow_ring_executor_disk_mode).
 * bytes_per_sec > 0 throttles every read and write to that rate (a slower disk in tests).
 * Weights or gradients on disk are not run yet (UNSUPPORTED). Errors: INVALID_ARGUMENT for a directory that is missing, not a directory or
 * not writable, or a stream out of range; OUT_OF_MEMORY when the file system has no room. */
typedef struct {
	const char *directory;
	double bytes_per_sec;  /* 0: the disk's own speed */
	int stream;            /* the handle's stream for disk reads and writes */
} Dataflow_Ring_Disk;

/* As create, with a disk tier (disk NULL: as create; a plan with a disk tier then fails). */
Dataflow_Status dataflow_ring_executor_create_with_disk(Dataflow_Handle *handle, const Dataflow_Blocked_Model *model,
							const Dataflow_Ring_Plan *plan, const Dataflow_Ring_Streams *streams,
							const Dataflow_Ring_Disk *disk, Dataflow_Ring_Executor **executor);
/* "O_DIRECT" or "buffered" (how the disk file is accessed); NULL without a disk tier. */
const char *dataflow_ring_executor_disk_mode(const Dataflow_Ring_Executor *executor);

/* Waits for the queued work, unregisters and frees everything (NULL: no-op). */
void dataflow_ring_executor_destroy(Dataflow_Ring_Executor *executor);

/* Bytes the executor holds: device (its one allocation) and host (registered arrays). */
uint64_t dataflow_ring_executor_device_bytes(const Dataflow_Ring_Executor *executor);
uint64_t dataflow_ring_executor_host_bytes(const Dataflow_Ring_Executor *executor);
/* 1 when the kind of block lives in device memory, 0 on the host, -1 for bad arguments. */
int dataflow_ring_executor_on_device(const Dataflow_Ring_Executor *executor, int block, Dataflow_Block_Kind kind);

/* Copies a block's kind (sizes.bytes[kind] bytes) out of / into the executor, wherever it lives;
 * waits for the executor's queued work first and for the copy. Writing PARAM of a model with
 * master weights also sets MASTER to its exact fp32 value (write MASTER afterwards to set it
 * otherwise). MASTER without master weights: INVALID_ARGUMENT. */
Dataflow_Status dataflow_ring_executor_read(Dataflow_Ring_Executor *executor, int block, Dataflow_Block_Kind kind,
					    void *dst);
Dataflow_Status dataflow_ring_executor_write(Dataflow_Ring_Executor *executor, int block, Dataflow_Block_Kind kind,
					     const void *src);

/* Forward, loss and backward of num_chunks chunks (at most plan.chunks_per_round *
 * plan.rounds_per_step; up to chunks_per_round per round, a round ending before a document
 * that would not fit in it whole), gradients of
 * loss_scale * sum of the token losses added to the gradients (accumulate_grads) or written
 * over them (0). The chunks' buffers are copied before the call returns. Token losses land in
 * the executor's host array (dataflow_ring_executor_outputs) once dataflow_ring_executor_wait
 * returns. Bad chunks (INVALID_ARGUMENT naming the chunk, nothing queued): sizes out of
 * range, or a continuing chunk that does not follow its predecessor (see Dataflow_Ring_Chunk). */
Dataflow_Status dataflow_ring_executor_accumulate(Dataflow_Ring_Executor *executor, const Dataflow_Ring_Chunk *chunks,
						  int64_t num_chunks, int accumulate_grads, float loss_scale);
/* Gradients *= factor (every block, wherever they live). */
Dataflow_Status dataflow_ring_executor_scale_grads(Dataflow_Ring_Executor *executor, float factor);
/* The global gradient norm (clipped to max_grad_norm as torch's clip_grad_norm_, 0: no
 * clipping) and one AdamW step (step counts from 1) over every block, where the plan puts it.
 * It returns with the update queued; with an optimizer stream of its own, it first waits for
 * the last update, whose failure it returns (the next step's, where no one read it before). */
Dataflow_Status dataflow_ring_executor_apply(Dataflow_Ring_Executor *executor, const Dataflow_AdamW_Params *params,
					     double max_grad_norm, int64_t step);
/* Waits for every queued stream of the executor (one host sync per stream used): the sync
 * point before reading weights or optimizer state (read, write, close wait here) and where a
 * failure of the queued update surfaces. */
Dataflow_Status dataflow_ring_executor_wait(Dataflow_Ring_Executor *executor);
/* Waits for the last accumulate's token losses (the outbound stream, which sends them after
 * the backward's gradients), not for an update queued after them: apply returns with it
 * queued, and unless the plan's optimizer is streamed (its memory is the training's) or the
 * state sharded, the next accumulate's forward of a block waits only for that block's update.
 * A streamed or overlapped optimizer sends blocks home on the outbound stream: waiting for
 * the losses then waits for those sends too. */
Dataflow_Status dataflow_ring_executor_wait_losses(Dataflow_Ring_Executor *executor);

/* Host results, valid after dataflow_ring_executor_wait (the losses also after
 * dataflow_ring_executor_wait_losses): the token losses of the last
 * accumulate (fp32, unscaled, 0 where unlabelled; chunk i's at i * plan.chunk_tokens) and the
 * pre-clip gradient norm of the last apply; a mixture of experts trained with HF's
 * load-balancing loss (router_aux_loss_coef > 0): router_loss, that loss of the last accumulate
 * (fp32, unweighted: the mean over its rounds, each round being one forward pass as HF's
 * model call is, of load_balancing_loss_func; NULL otherwise). The step's loss is the token
 * losses' mean + router_aux_loss_coef * router_loss. */
typedef struct {
	const float *token_losses;
	int64_t num_chunks, chunk_tokens;
	const float *grad_norm;
	const float *router_loss;
} Dataflow_Ring_Outputs;
Dataflow_Status dataflow_ring_executor_outputs(const Dataflow_Ring_Executor *executor, Dataflow_Ring_Outputs *outputs);

/* Data-parallel (comm NULL: none, the default): each block's gradient, once final in an
 * accumulate call (after its backward in the call's last round), is summed over comm's ranks
 * on `stream` (an all-reduce in rank order: the same bits on every rank) while compute goes on
 * with the blocks below, before it is sent home; apply then computes the same norm and update
 * on every rank. The caller scales the loss by 1 / the labelled tokens of every rank, and a
 * step's gradients must come from ONE accumulate call (a second call would sum the first's
 * already-summed gradients again). shard_optimizer (ZeRO-1): the adopted m, v and master hold
 * this rank's part of each block as dataflow_ring_shard_optimizer_state lays them out
 * (ring_data_parallel.c), or the plan's shard_ranks (the communicator's size) made the
 * executor keep only that part of m and v, on the device or the host, from the start:
 * gradients are reduce-scattered, each rank updates its part where the state lives, and the
 * weights are all-gathered into their home, the optimizer phase fenced. Such an executor's
 * read of m or v gathers the block from every rank (a collective: every rank reads), its
 * write keeps this rank's part; apply, read and write of m, v need the communicator first.
 * Waits for the queued work first. Errors: INVALID_ARGUMENT for a stream out of range,
 * sharding without adoption or a plan for the communicator's ranks, or a sharded plan without
 * shard_optimizer. */
Dataflow_Status dataflow_ring_executor_set_comm(Dataflow_Ring_Executor *executor, Dataflow_Comm *comm, int stream,
						int shard_optimizer);

/* ZeRO-1's layout of a resident model's optimizer state, the one set_comm's shard_optimizer
 * trains: blocks[b].m, .v and .master (fp32; NULL ones skipped) of each of model's blocks
 * become this rank's part of the block, [r q, (r + 1) q) with q = n / N, followed by the tail
 * [N q, n) every rank keeps (shard = 1), or whole again (0: the parts all-gathered; every rank
 * must call it, in the same order as its other collectives). New memory replaces the pointers
 * in blocks (the old is freed in stream order on `stream`); state_numel[b] receives the
 * elements of block b's state in the new layout. The model takes them back with
 * dataflow_llama_set_optimizer_state. */
Dataflow_Status dataflow_ring_shard_optimizer_state(Dataflow_Handle *handle, Dataflow_Comm *comm, int stream,
						    const Dataflow_Blocked_Model *model, Dataflow_Block_Memory *blocks,
						    int shard, int64_t *state_numel);

/* Trace (dataflow/trace.h): with a recorder attached, each unit of work the executor submits
 * is a span on its stream (Dataflow_Trace_Span.stream: the role, Dataflow_Ring_Streams order:
 * 0 compute, 1 inbound, 2 outbound, 3 optimizer, 4 comm, 5 disk; .what: a Dataflow_Ring_Work), the step
 * advances at each apply, and memory is sampled (host_in_use: the executor's host arrays) when
 * dataflow_ring_executor_wait returns. A step of L layers and K chunks per round records about
 * 3 L K + 4 L spans per round. trace NULL detaches; the caller keeps the recorder alive while
 * attached and reads it after dataflow_ring_executor_wait. Python: RingExecutor.trace. */
Dataflow_Status dataflow_ring_executor_set_trace(Dataflow_Ring_Executor *executor, Dataflow_Trace *trace);

typedef enum {
	DATAFLOW_RING_WORK_FORWARD,       /* compute: a block's forward of a chunk (embedding, layer) */
	DATAFLOW_RING_WORK_HEAD,          /* compute: the head's forward, loss and backward of a chunk */
	DATAFLOW_RING_WORK_BACKWARD,      /* compute: a block's recompute and backward of a chunk */
	DATAFLOW_RING_WORK_ZERO_GRAD,     /* compute: a gradient zeroed */
	DATAFLOW_RING_WORK_BATCH_IN,      /* inbound: a chunk's packed batch */
	DATAFLOW_RING_WORK_WEIGHTS_IN,    /* inbound: a block's weights into its slot or staging */
	DATAFLOW_RING_WORK_GRAD_IN,       /* inbound: a partial gradient back (second round on) */
	DATAFLOW_RING_WORK_ACTS_IN,       /* inbound: a layer's offloaded activations of a chunk */
	DATAFLOW_RING_WORK_ACTS_OUT,      /* outbound: a layer's activations of a chunk offloaded */
	DATAFLOW_RING_WORK_GRAD_OUT,      /* outbound: a block's gradient sent home */
	DATAFLOW_RING_WORK_LOSSES_OUT,    /* outbound: a chunk's token losses */
	DATAFLOW_RING_WORK_SCALE_GRADS,   /* optimizer: a block's gradient scaled */
	DATAFLOW_RING_WORK_GRAD_NORM,     /* optimizer: the global gradient norm and clip factor */
	DATAFLOW_RING_WORK_ADAMW,         /* optimizer: a block's AdamW update */
	DATAFLOW_RING_WORK_OPT_IN,        /* inbound: a block's optimizer state into its slot */
	DATAFLOW_RING_WORK_OPT_OUT,       /* outbound: a block's updated state sent home */
	DATAFLOW_RING_WORK_ALL_REDUCE,    /* comm: a block's gradient summed over the ranks */
	DATAFLOW_RING_WORK_DISK_READ,     /* disk: a block's optimizer state read into staging */
	DATAFLOW_RING_WORK_DISK_WRITE,    /* disk: a block's optimizer state written back */
	DATAFLOW_RING_NUM_WORK
} Dataflow_Ring_Work;

/* "forward", "weights in", ...; NULL for a value out of range. */
const char *dataflow_ring_work_name(Dataflow_Ring_Work what);

#endif
