#ifndef DATAFLOW_RING_PLAN_H
#define DATAFLOW_RING_PLAN_H

#include <stdint.h>

#include "dataflow/device_profile.h"
#include "dataflow/ring_model.h"

/* The ring planner: a pure function from a model (ring_model.h), a step's shape, memory
 * capacities, link speeds and a device profile to a plan, or to an error stating the least
 * device and host memory any plan needs. No handle, no allocation: plan a GPU run anywhere.
 *
 * What a plan means (the executor, issue 9 item 2, runs it):
 *   A step is rounds_per_step rounds; a round is chunks_per_round chunks of chunk_tokens
 *   tokens, run layer-major: every chunk of the round passes through a layer before the next
 *   layer. A chunk holds whole sequences (chunk_tokens a multiple of seq_len) or, when
 *   kv_context, a piece of one sequence attending over the K/V of its earlier pieces: every
 *   layer then keeps the keys and values of the round's tokens from its forward to its
 *   backward with its other activations (on the device, or offloaded: through two K/V
 *   staging pairs on the device, each a round's keys and values, alternating by layer, and
 *   a host copy), and one sequence's fp32 dK/dV are the chunk working set's.
 *   Layer weights live in weight_slots device slots: the forward prefetches layer l + 1 into
 *   the slot layer l + 1 - weight_slots left; the last weight_slots layers stay across the
 *   turn so the backward starts without refetching them. Gradients accumulate in grad_slots
 *   device slots and go to the host when a layer's backward ends (from the second round on,
 *   a layer's partial gradient comes back in first). weight_slots == num_layers (grad_slots
 *   likewise) means resident: no transfer at all.
 *   A layer's activations (its input x and what its save level keeps) stay on the device when
 *   activations_on_device[l], else go to the host after its forward and come back, in
 *   reverse, before its backward; the backward recomputes what the level does not keep.
 *   Layers keeping theirs on the device are the LAST ones (the backward needs them first).
 *   Save levels may differ by layer: the last layers may save everything (no recompute) while
 *   the ones below save less (save_level[l] never decreases going up).
 *   Gradients whose home is the host are stored there as host_gradients says (bf16: rounded
 *   each time they go home, widened when they come back; Dataflow_Host_Gradients).
 *   The optimizer (after the global gradient norm is known) runs on the device with every
 *   block's state resident; on the device streaming param, grad, m, v (and master) through
 *   optimizer slots, in the ring's memory (STREAMED) or in slots of their own (OVERLAPPED);
 *   or on the host. Every optimizer starts after the backward. A streamed one is fenced (the
 *   executor's streams all wait for its update: its slots are the ring's memory); the others
 *   run under the next step's forward, block b's forward waiting only for block b's update.
 *   The planner does not choose OVERLAPPED yet: a Trainer waits for each step's losses on
 *   the outbound stream, and reuses the host batch buffer after the inbound stream, the two
 *   streams its update's transfers use, so it would not overlap there.
 *
 * How the executor (next) consumes a plan, on any backend through the public dataflow_* calls:
 *   - refuse a plan made for another model: num_layers and model_param_bytes must match the
 *     blocked model it is given;
 *   - allocate device memory once, by purpose, exactly as device_bytes says: the resident
 *     embedding/head blocks (or one staging buffer), weight_slots layer buffers of the largest
 *     layer's PARAM bytes, grad_slots fp32 ones (with bf16 host gradients also two staging
 *     buffers of the largest such gradient's bf16 bytes, at most DATAFLOW_RING_GRAD_PIECE_BYTES),
 *     for each layer with activations_on_device its chunks_per_round inputs and saved buffers (dataflow_block_acts_bytes at save_level[l] and
 *     chunk_tokens; with kv_context also the chunk's keys and values), three offload staging
 *     buffers (and, kv_context, up to two K/V staging pairs for layers that offload), the
 *     chunk working set (recomputed, dacts, dataflow_blocked_model_workspace_bytes,
 *     dx/dy and last hidden state per chunk, packed batches, token losses, a sequence's fp32
 *     dK/dV when kv_context), two optimizer slots; the host side
 *     as host_bytes says, registered for transfers (enable_access_to_host_mem);
 *   - enqueue a whole step ahead on three streams (inbound, compute, outbound) in the order of
 *     blocked_model.h's "How a ring drives it", each slot reuse ordered by an event of the
 *     compute that last read it and each use by the event of the transfer that filled it;
 *   - report per phase the measured step next to phases[] (the executor's tests hold it
 *     within 20% on a throttled host link).
 *
 * Model of time (documented in ring_time.c): per layer and round, compute, inbound and
 * outbound run concurrently and a layer takes the longest of the three; compute =
 * matmul flops / (peak * matmul_fraction) + attention flops / (peak * attention_fraction) +
 * memory-bound bytes / memory_bytes_per_sec; backward = 2x forward matmul and memory,
 * 2.5x forward attention, plus the recompute its save level asks for. A K/V context changes
 * no compute: attention is counted over each sequence's causal window either way, and the
 * keys and values the backward reads were kept from the forward, not rebuilt; an offloading
 * layer's keys and values travel with its activations. A host optimizer runs under the next
 * step's forward (its phase starts at 0); a device one after the backward (ring_time.c). The
 * fastest plan wins, but one moving more bytes over the link must be predicted faster by more than DATAFLOW_RING_TIE_MARGIN than one moving fewer.
 * MFU = (6 * N * tokens + 3 * attention forward flops) / (step seconds * peak), N = the
 * weights tokens meet in matmuls (layers and LM head, not the embedding gather), attention
 * flops counted over the causal window: the model's flops, recompute excluded. */

/* A plan moving more bytes over the link wins only when predicted faster by more than this */
#define DATAFLOW_RING_TIE_MARGIN 0.02
#define DATAFLOW_RING_MAX_LAYERS 1024
#define DATAFLOW_RING_NAME_MAX 48
/* A disk's read and write rate when the request gives none: a PCIe 3.0 x4 NVMe's sequential
 * rate, conservative for newer drives (measure yours: dataflow plan --disk-bandwidth) */
#define DATAFLOW_RING_DISK_DEFAULT_BYTES_PER_SEC 2e9
/* What the disk tier may hold, in the order it takes them (Dataflow_Ring_Request.disk_kinds) */
enum { DATAFLOW_RING_DISK_OPTIMIZER_STATE = 1, DATAFLOW_RING_DISK_PARAMS = 2, DATAFLOW_RING_DISK_GRADS = 4 };

typedef enum {
	DATAFLOW_RING_OPT_DEVICE_RESIDENT = 0,
	DATAFLOW_RING_OPT_DEVICE_STREAMED = 1,    /* after the backward, in the ring's memory */
	DATAFLOW_RING_OPT_DEVICE_OVERLAPPED = 2,  /* in its own slots, unfenced (not chosen: see above) */
	DATAFLOW_RING_OPT_HOST = 3,
	DATAFLOW_RING_NUM_OPT = 4
} Dataflow_Ring_Optimizer;

/* How AdamW's m and v are stored (the user's choice: it changes numerics; the planner only
 * places them): fp32 (adamw_step), bf16 with stochastic rounding (adamw_step_bf16_state), or
 * blockwise 8-bit (adamw_step_8bit: uint8 codes, then an fp32 absmax per
 * DATAFLOW_ADAMW_8BIT_BLOCK elements, in one buffer per moment). */
typedef enum {
	DATAFLOW_OPTIMIZER_STATE_FP32 = 0,
	DATAFLOW_OPTIMIZER_STATE_BF16 = 1,
	DATAFLOW_OPTIMIZER_STATE_8BIT = 2,
	DATAFLOW_NUM_OPTIMIZER_STATES = 3
} Dataflow_Optimizer_State;

/* Bytes of one moment (m or v) of a block of numel elements stored as `state`: 4 numel, 2 numel,
 * or numel codes padded to 64 bytes then 4 bytes per block of DATAFLOW_ADAMW_8BIT_BLOCK; -1 for
 * a bad state or numel < 0. */
int64_t dataflow_optimizer_state_bytes(Dataflow_Optimizer_State state, int64_t numel);
/* ZeRO-1: the elements of a block of numel one rank of `ranks` keeps state for: its part of
 * numel / ranks and the tail of numel % ranks every rank updates alike (ring_data_parallel.c). */
int64_t dataflow_shard_numel(int64_t numel, int ranks);
/* "fp32", "bf16", "8bit"; NULL for a value out of range. */
const char *dataflow_optimizer_state_name(Dataflow_Optimizer_State state);

/* How a gradient whose home is on the host is stored there (the user's choice: it changes
 * numerics). Gradients always accumulate in fp32 on the device; with bf16 a gradient is
 * rounded (to nearest even) when it goes home and widened back to fp32 when it comes in for
 * the next round or the optimizer, so it is rounded once per round. Gradients on the device
 * (resident grad slots, the all-resident plan) are unaffected. */
typedef enum {
	DATAFLOW_HOST_GRADIENTS_FP32 = 0,
	DATAFLOW_HOST_GRADIENTS_BF16 = 1,
	DATAFLOW_NUM_HOST_GRADIENTS = 2
} Dataflow_Host_Gradients;

/* bf16 host gradients pass through two device staging buffers (one per direction) of at most
 * this many bytes: the outbound stream narrows a gradient piece by piece into its buffer and sends
 * each piece; the inbound stream brings each piece into its buffer and widens it into place. */
#define DATAFLOW_RING_GRAD_PIECE_BYTES ((int64_t)16 << 20)

/* "fp32", "bf16"; NULL for a value out of range. */
const char *dataflow_host_gradients_name(Dataflow_Host_Gradients host_gradients);

typedef struct {
	const Dataflow_Ring_Model *model;
	int64_t seq_len;          /* tokens per sequence */
	int64_t tokens_per_step;  /* a multiple of seq_len */
	int master_weights;       /* bf16 models: fp32 master weights (the MASTER kind) */
	Dataflow_Optimizer_State optimizer_state; /* how m and v are stored (0: fp32) */
	Dataflow_Host_Gradients host_gradients;   /* how host-held gradients are stored (0: fp32) */
	int shard_ranks;          /* ZeRO-1: fp32 state sharded over this many ranks, each keeping 1/N (0, 1: none) */
	uint64_t device_bytes;    /* device capacity the plan must stay within */
	uint64_t host_bytes;      /* host memory the plan may use */
	double h2d_bytes_per_sec; /* 0: the profile's */
	double d2h_bytes_per_sec; /* 0: the profile's */
	double host_adamw_bytes_per_sec; /* host optimizer's memory speed; 0: 20e9 (DDR5 server, threaded) */
	/* The disk tier (0: none): files under a directory holding, when host memory runs out,
	 * optimizer state first, then weights, then gradients (each kind whole), read and written
	 * through host staging on a disk stream. Rate 0: DATAFLOW_RING_DISK_DEFAULT_BYTES_PER_SEC. */
	uint64_t disk_bytes;
	double disk_bytes_per_sec;
	int disk_kinds; /* DATAFLOW_RING_DISK_* bits the disk may take (0: all; the executor runs
			 * DATAFLOW_RING_DISK_OPTIMIZER_STATE only, so a Trainer asks for that) */
	const Dataflow_Device_Profile *profile;
} Dataflow_Ring_Request;

/* What memory is for. Device entries of phase TRAINING are live during forward/backward,
 * OPTIMIZER during a streamed optimizer (reusing the ring's memory), BOTH throughout. */
typedef enum { DATAFLOW_RING_BOTH = 0, DATAFLOW_RING_TRAINING = 1, DATAFLOW_RING_OPTIMIZER = 2 } Dataflow_Ring_Phase_Kind;

typedef enum {
	DATAFLOW_RING_DEV_EDGE_BLOCKS,      /* embedding + head: params and grads (or their staging) */
	DATAFLOW_RING_DEV_OPTIMIZER_STATE,  /* m, v, master of every block (resident optimizer) */
	DATAFLOW_RING_DEV_WEIGHT_SLOTS,
	DATAFLOW_RING_DEV_GRAD_SLOTS,
	DATAFLOW_RING_DEV_ACTIVATIONS,      /* inputs + saved activations (+ K/V) kept on the device */
	DATAFLOW_RING_DEV_OFFLOAD_STAGING,  /* buffers offloaded activations (and K/V) pass through */
	DATAFLOW_RING_DEV_CHUNK_WORKING,    /* recomputed, dacts, workspace, dx/dy, head, batch, dK/dV */
	DATAFLOW_RING_DEV_OPTIMIZER_SLOTS,  /* streamed optimizer: 2 blocks' param, grad, m, v, master
					     * (optimizer phase; with the training's for the overlapped one) */
	DATAFLOW_RING_DEV_NUM
} Dataflow_Ring_Device_Purpose;

typedef enum {
	DATAFLOW_RING_HOST_PARAMS,
	DATAFLOW_RING_HOST_GRADS,
	DATAFLOW_RING_HOST_OPTIMIZER_STATE, /* m, v (and master) */
	DATAFLOW_RING_HOST_ACTIVATIONS,     /* offloaded activations of one round */
	DATAFLOW_RING_HOST_DISK_STAGING,    /* two blocks' worth of each kind on disk, moving through */
	DATAFLOW_RING_HOST_NUM
} Dataflow_Ring_Host_Purpose;

/* One phase of the predicted step: its duration and how long each stream is busy in it. */
typedef struct {
	char name[DATAFLOW_RING_NAME_MAX];
	double start_seconds, seconds;
	double inbound_seconds, compute_seconds, outbound_seconds;
	double disk_seconds; /* the disk stream's reads and writes */
} Dataflow_Ring_Phase;

enum { DATAFLOW_RING_MAX_PHASES = 8 };

typedef struct {
	/* the shape of a step */
	int64_t seq_len, tokens_per_step, chunk_tokens, chunks_per_round, rounds_per_step;
	int kv_context;
	int num_layers;
	uint64_t model_param_bytes;  /* PARAM bytes of every block: which model the plan is for */
	int64_t num_experts, experts_per_tok; /* the model's (ring_model.h; 0: dense) */
	uint64_t expert_param_bytes;
	/* placement */
	int embedding_resident, head_resident;
	int weight_slots, grad_slots;
	Dataflow_Save_Level save_level[DATAFLOW_RING_MAX_LAYERS];
	uint8_t activations_on_device[DATAFLOW_RING_MAX_LAYERS];
	Dataflow_Ring_Optimizer optimizer;
	int master_weights;
	Dataflow_Optimizer_State optimizer_state;
	Dataflow_Host_Gradients host_gradients;
	int shard_ranks;             /* ZeRO-1: the optimizer state counted per rank of this many (1: unsharded) */
	/* memory maps, bytes by purpose */
	uint64_t device_bytes[DATAFLOW_RING_DEV_NUM];
	Dataflow_Ring_Phase_Kind device_phase[DATAFLOW_RING_DEV_NUM];
	uint64_t host_bytes[DATAFLOW_RING_HOST_NUM];
	uint64_t device_capacity, host_capacity;
	uint64_t device_peak_bytes;  /* the larger of the two phases' sums */
	uint64_t host_total_bytes;
	/* the disk tier: bytes in files by host purpose (weights, gradients, optimizer state; the
	 * host keeps their staging instead), capacity, rate, and what a step reads and writes */
	uint64_t disk_bytes[DATAFLOW_RING_HOST_NUM];
	uint64_t disk_capacity, disk_total_bytes;
	double disk_bytes_per_sec;
	uint64_t disk_read_bytes, disk_write_bytes;
	/* per step */
	uint64_t inbound_bytes, outbound_bytes;
	double model_flops;          /* the MFU numerator */
	double peak_flops;
	/* predicted timeline */
	int num_phases;
	Dataflow_Ring_Phase phases[DATAFLOW_RING_MAX_PHASES];
	double step_seconds, tokens_per_second, mfu;
	/* when nothing fits (status OUT_OF_MEMORY): least device bytes of any plan with unlimited
	 * host memory, least host bytes of any plan with unlimited device memory */
	uint64_t min_device_bytes, min_host_bytes;
} Dataflow_Ring_Plan;

/* The fastest plan (least predicted step time) within both capacities. Bad requests:
 * DATAFLOW_ERR_INVALID_ARGUMENT naming the field. Nothing fits: DATAFLOW_ERR_OUT_OF_MEMORY
 * with the minimum device and host memory in the message and in plan->min_*_bytes. */
Dataflow_Status dataflow_ring_plan(const Dataflow_Ring_Request *request, Dataflow_Ring_Plan *plan);

/* The all-resident plan: every block's weights, gradient and optimizer state and every layer's
 * activations (at save_level) on the device, the step one chunk of tokens_per_step tokens: what a
 * Trainer runs when training fits the device (the executor may adopt the model's own block
 * memory for it, dataflow_ring_executor_adopt). Its memory map, timeline and MFU are the
 * planner's as for any plan. OUT_OF_MEMORY (plan->min_device_bytes: what it needs) when it
 * does not fit request->device_bytes; bad requests: INVALID_ARGUMENT. */
Dataflow_Status dataflow_ring_plan_resident(const Dataflow_Ring_Request *request, Dataflow_Save_Level save_level,
					    Dataflow_Ring_Plan *plan);

/* The model of time's seconds for a layer's forward + backward at save level all (no
 * recompute) over one chunk of `tokens` tokens (whole sequences of seq_len), at `dtype`'s peak:
 * what dataflow.ring.calibrate fits a profile to. Bad arguments: INVALID_ARGUMENT. */
Dataflow_Status dataflow_ring_layer_seconds(const Dataflow_Device_Profile *profile, const Dataflow_Ring_Block *layer,
					    DataflowDatatype dtype, int64_t seq_len, int64_t tokens, double *seconds);

/* Human-readable plan: placement table, memory maps, timeline, step time, tokens/s, MFU.
 * Writes at most size bytes (NUL-terminated); returns the length the whole text needs. */
int64_t dataflow_ring_plan_describe(const Dataflow_Ring_Plan *plan, char *out, int64_t size);

const char *dataflow_ring_device_purpose_name(Dataflow_Ring_Device_Purpose purpose);
const char *dataflow_ring_host_purpose_name(Dataflow_Ring_Host_Purpose purpose);
const char *dataflow_ring_optimizer_name(Dataflow_Ring_Optimizer optimizer);

#endif
