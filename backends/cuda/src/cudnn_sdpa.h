#ifndef DATAFLOW_CUDNN_SDPA_H
#define DATAFLOW_CUDNN_SDPA_H

/* cuDNN's fused scaled-dot-product attention (forward and backward) through its backend API,
 * over the attention ops' packed layout as one sequence: Q, O, dQ, dO [T][Hq][d] and K, V, dK,
 * dV [T][Hkv][d] are (B = 1, H, S = T, d) tensors with strides (T H d, d, H d, 1); the stats
 * (natural-log logsumexp) are (1, Hq, T, 1), i.e. [Hq][T] as the ops' lse. Causal masking is a
 * score-modifier subgraph of one diagonal band mask (keep key j <= query i). The builder uses
 * only the Cudnn_Api table it is given, so tests drive it with a mock. */

#include "cudnn_api.h"
#include "dataflow/status.h"

typedef struct {
	int dtype; /* CUDNN_DATA_HALF or CUDNN_DATA_BFLOAT16 */
	int64_t tokens, q_heads, kv_heads, head_dim;
	int causal, backward;
} Cudnn_Sdpa_Shape;

#define CUDNN_SDPA_MAX_DESCRIPTORS 32

typedef struct {
	Cudnn_Sdpa_Shape shape;
	cudnnBackendDescriptor_t plan;
	int64_t workspace_bytes;
	/* every descriptor made for the plan, kept alive with it */
	cudnnBackendDescriptor_t descriptors[CUDNN_SDPA_MAX_DESCRIPTORS];
	int num_descriptors;
} Cudnn_Sdpa_Plan;

/* Unique ids of the graph's tensors (the variant pack names them). */
enum {
	CUDNN_SDPA_Q = 1,
	CUDNN_SDPA_K,
	CUDNN_SDPA_V,
	CUDNN_SDPA_O,
	CUDNN_SDPA_STATS,
	CUDNN_SDPA_SCALE,
	CUDNN_SDPA_DO,
	CUDNN_SDPA_DQ,
	CUDNN_SDPA_DK,
	CUDNN_SDPA_DV,
	CUDNN_SDPA_BOUND, /* by value: the band's right-bound shift, 0 */
	CUDNN_SDPA_FILL,  /* by value: -inf for masked scores */
	CUDNN_SDPA_SCORES = 100, /* virtual: the subgraph's input and output */
	CUDNN_SDPA_MASKED = 101,
};

/* 1 when a cuDNN status says this cuDNN will not run the graph, so the caller falls back to its
 * own kernels: any bad-parameter (2xxx, as versions differ in what they accept) or not-supported
 * (3xxx) status, a failed runtime compilation of the fused kernel (4001), a missing or
 * mismatched sub-library. Nothing has been queued then. Other statuses (internal errors, failed
 * execution) are errors. The builder and execute return DATAFLOW_ERR_UNSUPPORTED for refusals. */
int cudnn_status_is_refusal(cudnnStatus_t s);

/* Builds the graph for shape and finalizes the first execution plan cuDNN's heuristics (mode A,
 * then the fallback list) offer. DATAFLOW_ERR_UNSUPPORTED when no engine takes the graph. On
 * failure the plan holds nothing. */
Dataflow_Status cudnn_sdpa_build(const Cudnn_Api *api, cudnnHandle_t handle, const Cudnn_Sdpa_Shape *shape,
				 Cudnn_Sdpa_Plan *plan);
void cudnn_sdpa_release(const Cudnn_Api *api, Cudnn_Sdpa_Plan *plan);

/* The tensors of one run: forward reads q, k, v and writes o, stats; backward reads q, k, v, o,
 * dout, stats and writes dq, dk, dv. */
typedef struct {
	const void *q, *k, *v, *dout;
	void *o, *stats, *dq, *dk, *dv;
	float scale;
	void *workspace; /* plan->workspace_bytes of device memory */
} Cudnn_Sdpa_Args;

/* Runs the plan on the handle's current stream. */
Dataflow_Status cudnn_sdpa_execute(const Cudnn_Api *api, cudnnHandle_t handle, const Cudnn_Sdpa_Plan *plan,
				   const Cudnn_Sdpa_Args *args);

#endif
