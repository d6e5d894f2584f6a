#ifndef DATAFLOWRING_RING_INTERNAL_H
#define DATAFLOWRING_RING_INTERNAL_H

/* Private to libdataflowring: one candidate plan, and the memory and time models the search
 * evaluates it with. Sizes are doubles: exact below 2^53 bytes, and a hostile config
 * overflows to a large number, never wraps. */

#include "dataflow/ring_plan.h"

enum { EDGE_EMBEDDING = 1, EDGE_HEAD = 2 };

typedef struct {
	int64_t chunk, chunks_per_round, rounds;
	Dataflow_Save_Level level;
	Dataflow_Ring_Optimizer opt;
	int edge_resident;   /* EDGE_* bits */
	int weight_slots, grad_slots;
	int device_layers;   /* the last device_layers layers keep activations on the device */
	int high_layers;     /* the last high_layers layers save everything (DATAFLOW_SAVE_ALL), the rest level */
	int disk;            /* DATAFLOW_RING_DISK_* bits: the host kinds kept in files (set by ring_memory) */
	double disk_bytes;   /* their bytes (set by ring_memory) */
} Ring_Candidate;


/* Chunks are pieces of sequences attending over a K/V context: each layer's keys and values of
 * the round are kept (on the device, or offloaded with the layer's other activations). */
static inline int ring_kv_context(const Dataflow_Ring_Request *r, const Ring_Candidate *c)
{
	return c->chunk < r->seq_len;
}

/* Validated request and the figures derived from it once. */
typedef struct {
	const Dataflow_Ring_Request *req;
	const Dataflow_Ring_Model *model;
	int num_layers;
	double h2d, d2h, host_adamw;
	double disk_rate;            /* the disk tier's bytes/s (reads and writes share it) */
	double matmul_rate, attention_rate, memory_rate, peak;
	double max_param, max_grad;  /* of a layer: a slot's bytes */
	int master;                  /* the MASTER kind counts */
	Dataflow_Optimizer_State state; /* how m and v are stored */
	int shard_ranks;             /* ZeRO-1: a rank keeps the state of dataflow_shard_numel elements (1: all) */
	double host_grad_ratio;      /* bytes of a host-held gradient per byte of the model's fp32 one */
	double kv_grad_ratio;        /* a K/V context's fp32 gradient bytes per byte of keys and values */
} Ring_Context;

static inline const Dataflow_Ring_Block *ring_layer(const Ring_Context *x, int l)
{
	return &x->model->blocks[1 + l];
}

/* The save level of layer block b (a pointer into the model's blocks) in candidate c. */
static inline Dataflow_Save_Level ring_save_level(const Ring_Context *x, const Ring_Candidate *c,
						  const Dataflow_Ring_Block *b)
{
	int l = (int)(b - x->model->blocks) - 1;
	return l >= x->num_layers - c->high_layers ? DATAFLOW_SAVE_ALL : c->level;
}

/* Bytes per token a layer keeps from its forward to its backward (on the device or offloaded):
 * its input, what its save level saves, and its keys and values with a K/V context. */
static inline double ring_kept_bytes_per_token(const Ring_Context *x, const Ring_Candidate *c, const Dataflow_Ring_Block *b)
{
	return (double)(b->sizes.saved_bytes_per_token[ring_save_level(x, c, b)] + x->model->hidden_bytes_per_token) +
	       (ring_kv_context(x->req, c) ? (double)b->kv_bytes_per_token : 0);
}

/* a block's optimizer state on one rank: m and v as stored (the model reports fp32 moments:
 * numel = bytes / 4), and (with master weights) the fp32 master copy; ZeRO-1 keeps 1/N of it */
static inline double ring_opt_state_bytes(const Ring_Context *x, const Dataflow_Ring_Block *b)
{
	int64_t numel = dataflow_shard_numel(b->sizes.bytes[DATAFLOW_BLOCK_ADAM_M] / 4, x->shard_ranks);
	return 2 * (double)dataflow_optimizer_state_bytes(x->state, numel) + (x->master ? 4 * (double)numel : 0);
}

/* a block's gradient as the host stores it (the model reports fp32 gradients) */
static inline double ring_host_grad_bytes(const Ring_Context *x, const Dataflow_Ring_Block *b)
{
	return x->host_grad_ratio * (double)b->sizes.bytes[DATAFLOW_BLOCK_GRAD];
}

static inline uint64_t ring_clamp_bytes(double b)
{
	return b >= 18446744073709551615.0 ? UINT64_MAX : b > 0 ? (uint64_t)b : 0;
}

/* (query, key) pairs inside the causal window of one sequence of S tokens when a query sees
 * at most `window` keys (a sliding window; 0: every earlier key). */
static inline double ring_causal_pairs(double S, int64_t window)
{
	double w = (double)window;
	return window <= 0 || S <= w ? S * (S + 1) / 2 : w * (w + 1) / 2 + (S - w) * w;
}

/* Fills plan's memory maps for c and sets c->disk; returns 1 when it fits every capacity. */
int ring_memory(const Ring_Context *x, Ring_Candidate *c, Dataflow_Ring_Plan *plan, double *device_peak,
		double *host_total);
/* ring_disk_plan.c: while the host map is over the host capacity and the request has a disk,
 * moves host kinds into files (optimizer state, then weights, then gradients, each whole),
 * the host keeping two of its largest blocks of each as staging; returns the DATAFLOW_RING_DISK_* bits and
 * fills disk[] (by host purpose). largest[]: a block's largest bytes per host purpose. */
int ring_disk_place(const Ring_Context *x, double host[DATAFLOW_RING_HOST_NUM], double disk[DATAFLOW_RING_HOST_NUM],
		    const double largest[DATAFLOW_RING_HOST_NUM]);
/* OUT_OF_MEMORY: the request's disk is short of `need` bytes (device and host would do). */
Dataflow_Status ring_disk_short(const Dataflow_Ring_Request *r, double need);
/* Fills plan's timeline, transfer totals, step time, tokens/s and MFU for c (plan may be NULL);
 * returns the step time, and the bytes a step moves over the link (in + out) in *link_bytes. */
double ring_time(const Ring_Context *x, const Ring_Candidate *c, Dataflow_Ring_Plan *plan, double *link_bytes);

/* ring_units.c: "512 B", "3.25 MiB", "24.0 GiB" (valid until the end of the full expression
 * that made it), and the unit (s, ms, us) and scale that show `seconds` without leading zeros. */
typedef struct {
	char text[24];
} Ring_Text;
Ring_Text ring_bytes_text(double bytes);
const char *ring_seconds_unit(double seconds, double *scale);

#endif
