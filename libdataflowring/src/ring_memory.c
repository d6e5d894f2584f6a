/* The memory model: what a candidate plan holds on the device and on the host, by purpose. */
#include "ring_internal.h"

static double kind_bytes(const Dataflow_Ring_Block *b, Dataflow_Block_Kind k)
{
	return (double)b->sizes.bytes[k];
}

/* a layer's input and saved activations for one chunk, with 64-byte alignment per array */
static double layer_chunk_acts(const Ring_Context *x, const Dataflow_Ring_Block *b, const Ring_Candidate *c)
{
	return (double)(b->sizes.saved_bytes_per_token[ring_save_level(x, c, b)] + x->model->hidden_bytes_per_token) *
		       (double)c->chunk + 16 * 64;
}

int ring_memory(const Ring_Context *x, Ring_Candidate *c, Dataflow_Ring_Plan *plan, double *device_peak,
		double *host_total)
{
	const Dataflow_Ring_Model *m = x->model;
	const Dataflow_Ring_Block *emb = &m->blocks[0], *head = &m->blocks[m->num_blocks - 1];
	int L = x->num_layers;
	double T = (double)c->chunk, K = (double)c->chunks_per_round, H = (double)m->hidden_bytes_per_token;
	double dev[DATAFLOW_RING_DEV_NUM] = {0}, host[DATAFLOW_RING_HOST_NUM] = {0}, disk[DATAFLOW_RING_HOST_NUM] = {0};
	double largest[DATAFLOW_RING_HOST_NUM] = {0};
	int weights_resident = c->weight_slots >= L, grads_resident = c->grad_slots >= L;
	int host_copies = c->opt != DATAFLOW_RING_OPT_DEVICE_RESIDENT;

	/* embedding and head: resident (param + grad), or one staging buffer the larger needs */
	double staging = 0;
	const Dataflow_Ring_Block *edges[2] = {emb, head};
	for (int e = 0; e < 2; e++) {
		double pg = kind_bytes(edges[e], DATAFLOW_BLOCK_PARAM) + kind_bytes(edges[e], DATAFLOW_BLOCK_GRAD);
		if (c->edge_resident & (e ? EDGE_HEAD : EDGE_EMBEDDING))
			dev[DATAFLOW_RING_DEV_EDGE_BLOCKS] += pg;
		else if (pg > staging)
			staging = pg;
	}
	dev[DATAFLOW_RING_DEV_EDGE_BLOCKS] += staging;

	double max_opt_block = 0, max_host_grad = 0, max_dacts = 0, max_recomputed = 0, max_stage = 0, max_kv = 0;
	int kv_context = ring_kv_context(x->req, c), offloading = 0;
	for (int b = 0; b < m->num_blocks; b++) {
		const Dataflow_Ring_Block *blk = &m->blocks[b];
		int layer = b > 0 && b < m->num_blocks - 1;
		int edge_res = !layer && (c->edge_resident & (b == 0 ? EDGE_EMBEDDING : EDGE_HEAD));
		int param_res = layer ? weights_resident : edge_res, grad_res = layer ? grads_resident : edge_res;
		if (c->opt == DATAFLOW_RING_OPT_DEVICE_RESIDENT)
			dev[DATAFLOW_RING_DEV_OPTIMIZER_STATE] += ring_opt_state_bytes(x, blk);
		/* the host keeps what the device does not, and everything an optimizer off the device reads */
		if (!param_res || c->opt == DATAFLOW_RING_OPT_HOST)
			host[DATAFLOW_RING_HOST_PARAMS] += kind_bytes(blk, DATAFLOW_BLOCK_PARAM);
		if (!grad_res || c->opt == DATAFLOW_RING_OPT_HOST)
			host[DATAFLOW_RING_HOST_GRADS] += ring_host_grad_bytes(x, blk);
		if (host_copies)
			host[DATAFLOW_RING_HOST_OPTIMIZER_STATE] += ring_opt_state_bytes(x, blk);
		/* AdamW reads a bf16 host gradient as it is (adamw_step's grad dtype) */
		double host_grad = !grad_res || c->opt == DATAFLOW_RING_OPT_HOST ? ring_host_grad_bytes(x, blk) : 0;
		double kinds[3] = {kind_bytes(blk, DATAFLOW_BLOCK_PARAM), ring_host_grad_bytes(x, blk),
				   ring_opt_state_bytes(x, blk)};
		for (int k = 0; k < 3; k++) /* host purposes 0..2: weights, gradients (as the host stores them), optimizer state */
			largest[k] = kinds[k] > largest[k] ? kinds[k] : largest[k];
		double streamed = ring_opt_state_bytes(x, blk) + (param_res ? 0 : kind_bytes(blk, DATAFLOW_BLOCK_PARAM)) +
				  (grad_res ? 0 : host_grad);
		if (x->host_grad_ratio < 1 && host_grad > max_host_grad)
			max_host_grad = host_grad;
		if (streamed > max_opt_block)
			max_opt_block = streamed;
		if ((double)blk->sizes.dacts_bytes_per_token > max_dacts)
			max_dacts = (double)blk->sizes.dacts_bytes_per_token;
		if (!layer)
			continue;
		if ((double)blk->sizes.recomputed_bytes_per_token[ring_save_level(x, c, blk)] > max_recomputed)
			max_recomputed = (double)blk->sizes.recomputed_bytes_per_token[ring_save_level(x, c, blk)];
		/* with a K/V context, the round's keys and values too (two arrays) */
		double kv = kv_context ? K * T * (double)blk->kv_bytes_per_token + 2 * 64 : 0;
		double acts = K * layer_chunk_acts(x, blk, c) + kv;
		if (b - 1 >= L - c->device_layers) {
			dev[DATAFLOW_RING_DEV_ACTIVATIONS] += acts;
		} else {
			host[DATAFLOW_RING_HOST_ACTIVATIONS] += acts;
			offloading++;
			max_kv = kv > max_kv ? kv : max_kv;
		}
		if (layer_chunk_acts(x, blk, c) > max_stage)
			max_stage = layer_chunk_acts(x, blk, c);
	}
	dev[DATAFLOW_RING_DEV_WEIGHT_SLOTS] = (double)c->weight_slots * x->max_param;
	/* bf16 host gradients pass through two staging buffers: one going home, one coming in */
	double piece = (double)DATAFLOW_RING_GRAD_PIECE_BYTES;
	dev[DATAFLOW_RING_DEV_GRAD_SLOTS] = (double)c->grad_slots * x->max_grad + 2 * (max_host_grad < piece ? max_host_grad : piece);
	/* one chunk being written, one going out, one coming in; offloading layers' keys and values
	 * in two sets (one layer's going out or coming in while the next one's are used) */
	dev[DATAFLOW_RING_DEV_OFFLOAD_STAGING] =
		(c->device_layers < L ? 3 * max_stage : 0) + (offloading < 2 ? offloading : 2) * max_kv;
	/* one chunk's recomputed, dacts, workspace and head activations; every chunk of the round's
	 * last hidden state, dy and dx (layer-major: a layer's backward runs all chunks); the
	 * round's packed batches and token losses; the fp32 dK, dV of one sequence (K/V context);
	 * a mixture of experts' router statistics and load-balancing loss (counted with or without it) */
	double kv = 0;
	for (int l = 0; l < L && ring_kv_context(x->req, c); l++)
		if (x->kv_grad_ratio * (double)ring_layer(x, l)->kv_bytes_per_token * (double)x->req->seq_len + 2 * 64 > kv)
			kv = x->kv_grad_ratio * (double)ring_layer(x, l)->kv_bytes_per_token * (double)x->req->seq_len + 2 * 64;
	dev[DATAFLOW_RING_DEV_CHUNK_WORKING] =
		(max_recomputed + max_dacts + (double)head->sizes.saved_bytes_per_token[c->level]) * T +
		(double)m->workspace_fixed_bytes + (double)m->workspace_bytes_per_token * T + 3 * K * H * T +
		K * (4 * 4 * T + 64 * 4) + kv + (m->num_experts ? 8.0 * (double)m->num_experts + 2 * 64 : 0);
	if (c->opt == DATAFLOW_RING_OPT_DEVICE_STREAMED || c->opt == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED)
		dev[DATAFLOW_RING_DEV_OPTIMIZER_SLOTS] = 2 * max_opt_block; /* one block updating, one in flight */

	c->disk = ring_disk_place(x, host, disk, largest);

	double both = 0, training = 0, optimizer = 0, host_sum = 0, disk_sum = 0;
	for (int p = 0; p < DATAFLOW_RING_DEV_NUM; p++) {
		Dataflow_Ring_Phase_Kind kind = p == DATAFLOW_RING_DEV_OPTIMIZER_SLOTS
							? (c->opt == DATAFLOW_RING_OPT_DEVICE_OVERLAPPED ? DATAFLOW_RING_TRAINING
													  : DATAFLOW_RING_OPTIMIZER)
						: p == DATAFLOW_RING_DEV_EDGE_BLOCKS || p == DATAFLOW_RING_DEV_OPTIMIZER_STATE ||
								  /* resident slots hold the truth the optimizer updates */
								  (p == DATAFLOW_RING_DEV_WEIGHT_SLOTS && weights_resident) ||
								  (p == DATAFLOW_RING_DEV_GRAD_SLOTS && grads_resident)
							? DATAFLOW_RING_BOTH
							: DATAFLOW_RING_TRAINING;
		both += kind == DATAFLOW_RING_BOTH ? dev[p] : 0;
		training += kind == DATAFLOW_RING_TRAINING ? dev[p] : 0;
		optimizer += kind == DATAFLOW_RING_OPTIMIZER ? dev[p] : 0;
		if (plan) {
			plan->device_bytes[p] = ring_clamp_bytes(dev[p]);
			plan->device_phase[p] = kind;
		}
	}
	for (int p = 0; p < DATAFLOW_RING_HOST_NUM; p++) {
		host_sum += host[p];
		disk_sum += disk[p];
		if (plan) {
			plan->host_bytes[p] = ring_clamp_bytes(host[p]);
			plan->disk_bytes[p] = ring_clamp_bytes(disk[p]);
		}
	}
	*device_peak = both + (training > optimizer ? training : optimizer);
	*host_total = host_sum;
	if (plan) {
		plan->device_peak_bytes = ring_clamp_bytes(*device_peak);
		plan->host_total_bytes = ring_clamp_bytes(host_sum);
		plan->disk_total_bytes = ring_clamp_bytes(disk_sum);
	}
	c->disk_bytes = disk_sum;
	return *device_peak <= (double)x->req->device_bytes && host_sum <= (double)x->req->host_bytes &&
	       disk_sum <= (double)x->req->disk_bytes;
}
