/* A plan as text: the step's shape, the placement table, both memory maps, the timeline. */
#include <stdarg.h>
#include <stdio.h>

#include "ring_internal.h"

typedef struct {
	char *out;
	int64_t size, length;
} Text;

#ifdef __GNUC__
__attribute__((format(printf, 2, 3)))
#endif
static void put(Text *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int64_t room = t->length < t->size ? t->size - t->length : 0;
	int n = vsnprintf(room ? t->out + t->length : NULL, (size_t)room, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->length += n;
}

const char *dataflow_ring_device_purpose_name(Dataflow_Ring_Device_Purpose p)
{
	static const char *names[DATAFLOW_RING_DEV_NUM] = {
		"embedding + head", "optimizer state",  "weight slots",  "gradient slots",
		"activations",      "offload staging",  "chunk working", "optimizer slots"};
	return (int)p >= 0 && p < DATAFLOW_RING_DEV_NUM ? names[p] : "?";
}

const char *dataflow_ring_host_purpose_name(Dataflow_Ring_Host_Purpose p)
{
	static const char *names[DATAFLOW_RING_HOST_NUM] = {"weights", "gradients", "optimizer state",
							    "offloaded activations", "disk staging"};
	return (int)p >= 0 && p < DATAFLOW_RING_HOST_NUM ? names[p] : "?";
}

const char *dataflow_ring_optimizer_name(Dataflow_Ring_Optimizer o)
{
	static const char *names[DATAFLOW_RING_NUM_OPT] = {"device (resident state)",
							   "device (state streamed through slots after the backward)",
							   "device (state streamed through slots of its own)",
							   "host"};
	return (int)o >= 0 && o < DATAFLOW_RING_NUM_OPT ? names[o] : "?";
}

static const char *level_name(Dataflow_Save_Level level)
{
	return level == DATAFLOW_SAVE_INPUT ? "input" : level == DATAFLOW_SAVE_ATTENTION ? "attention" : "all";
}

/* Layers as runs of equal placement: "layers 0-23: host, save input (recompute all)". */
static void placement(Text *t, const Dataflow_Ring_Plan *p)
{
	int start = 0;
	for (int l = 1; l <= p->num_layers; l++) {
		if (l < p->num_layers && p->save_level[l] == p->save_level[start] &&
		    p->activations_on_device[l] == p->activations_on_device[start])
			continue;
		Dataflow_Save_Level s = p->save_level[start];
		put(t, "  layers %d-%d: activations on %s, save %s%s\n", start, l - 1,
		    p->activations_on_device[start] ? "device" : "host (offloaded)", level_name(s),
		    s == DATAFLOW_SAVE_INPUT ? " (backward recomputes the layer)"
		    : s == DATAFLOW_SAVE_ATTENTION ? " (backward recomputes all but attention)" : "");
		start = l;
	}
}

int64_t dataflow_ring_plan_describe(const Dataflow_Ring_Plan *p, char *out, int64_t size)
{
	Text t = {out, out ? size : 0, 0};
	if (t.size > 0)
		out[0] = '\0';
	if (!p)
		return 0;
	put(&t, "step: %lld tokens = %lld round(s) x %lld chunk(s) x %lld tokens (sequences of %lld%s)\n",
	    (long long)p->tokens_per_step, (long long)p->rounds_per_step, (long long)p->chunks_per_round,
	    (long long)p->chunk_tokens, (long long)p->seq_len,
	    p->kv_context ? "; a chunk attends over its sequence's earlier chunks" : "");
	put(&t, "model: %d layers, %s of weights\n", p->num_layers, ring_bytes_text((double)p->model_param_bytes).text);
	if (p->num_experts)
		put(&t, "experts: %lld per layer (%s of weights each), %lld routed per token; predictions assume an even "
			"routing (each expert gets %lld/%lld of a chunk's tokens)\n",
		    (long long)p->num_experts, ring_bytes_text((double)p->expert_param_bytes).text,
		    (long long)p->experts_per_tok, (long long)p->experts_per_tok, (long long)p->num_experts);
	put(&t, "embedding %s, head %s; %d layers: %d weight slot(s)%s, %d gradient slot(s)%s\n",
	    p->embedding_resident ? "resident" : "streamed", p->head_resident ? "resident" : "streamed",
	    p->num_layers, p->weight_slots, p->weight_slots >= p->num_layers ? " (all resident)" : "",
	    p->grad_slots, p->grad_slots >= p->num_layers ? " (all resident)" : "");
	placement(&t, p);
	put(&t, "optimizer: AdamW on the %s, %s state (m, v)%s; %s\n", dataflow_ring_optimizer_name(p->optimizer),
	    dataflow_optimizer_state_name(p->optimizer_state), p->master_weights ? ", fp32 master weights" : "",
	    p->shard_ranks > 1 ? "runs after the backward, fenced (ZeRO-1, below)"
	    : p->optimizer == DATAFLOW_RING_OPT_DEVICE_STREAMED ? "runs after the backward, fenced (its slots are the ring's memory)"
	    : p->optimizer == DATAFLOW_RING_OPT_HOST ? "runs under the next step's forward (block b's forward waits for b's update)"
						     : "overlaps the next step's forward, counted after the backward (one device)");
	if (p->shard_ranks > 1)
		put(&t, "ZeRO-1: each of %d ranks keeps 1/%d of the optimizer state (m, v) and updates its part of "
			"each block, the weights all-gathered after (fenced)\n", p->shard_ranks, p->shard_ranks);
	if (p->host_bytes[DATAFLOW_RING_HOST_GRADS] || p->disk_bytes[DATAFLOW_RING_HOST_GRADS]) /* home: host or disk */
		put(&t, "host gradients: %s%s\n", dataflow_host_gradients_name(p->host_gradients),
		    p->host_gradients == DATAFLOW_HOST_GRADIENTS_BF16
			    ? " (accumulated in fp32 on the device, rounded to nearest even when sent home each round)"
			    : "");
	else if (p->host_gradients != DATAFLOW_HOST_GRADIENTS_FP32)
		put(&t, "host gradients: none (every gradient stays on the device): %s changes nothing\n",
		    dataflow_host_gradients_name(p->host_gradients));
	put(&t, "device memory (capacity %s, peak %s):\n", ring_bytes_text((double)p->device_capacity).text,
	    ring_bytes_text((double)p->device_peak_bytes).text);
	for (int i = 0; i < DATAFLOW_RING_DEV_NUM; i++)
		if (p->device_bytes[i])
			put(&t, "  %-18s %10s%s\n", dataflow_ring_device_purpose_name((Dataflow_Ring_Device_Purpose)i),
			    ring_bytes_text((double)p->device_bytes[i]).text,
			    p->device_phase[i] == DATAFLOW_RING_OPTIMIZER ? "  (optimizer phase, reuses the ring's memory)"
			    : p->device_phase[i] == DATAFLOW_RING_TRAINING ? "  (forward/backward)" : "");
	put(&t, "host memory (capacity %s, used %s):\n", ring_bytes_text((double)p->host_capacity).text,
	    ring_bytes_text((double)p->host_total_bytes).text);
	for (int i = 0; i < DATAFLOW_RING_HOST_NUM; i++)
		if (p->host_bytes[i])
			put(&t, "  %-22s %10s\n", dataflow_ring_host_purpose_name((Dataflow_Ring_Host_Purpose)i),
			    ring_bytes_text((double)p->host_bytes[i]).text);
	if (p->disk_capacity) {
		put(&t, "disk (capacity %s, used %s, %s/s):\n", ring_bytes_text((double)p->disk_capacity).text,
		    ring_bytes_text((double)p->disk_total_bytes).text, ring_bytes_text(p->disk_bytes_per_sec).text);
		for (int i = 0; i < DATAFLOW_RING_HOST_NUM; i++)
			if (p->disk_bytes[i])
				put(&t, "  %-22s %10s\n", dataflow_ring_host_purpose_name((Dataflow_Ring_Host_Purpose)i),
				    ring_bytes_text((double)p->disk_bytes[i]).text);
	}
	put(&t, "per step: %s inbound, %s outbound", ring_bytes_text((double)p->inbound_bytes).text,
	    ring_bytes_text((double)p->outbound_bytes).text);
	if (p->disk_total_bytes)
		put(&t, ", %s disk read, %s disk written", ring_bytes_text((double)p->disk_read_bytes).text,
		    ring_bytes_text((double)p->disk_write_bytes).text);
	put(&t, "\n");
	double scale;
	const char *unit = ring_seconds_unit(p->step_seconds, &scale);
	put(&t, "predicted timeline (%s; phases summed over rounds; busy time per stream):\n", unit);
	put(&t, "  %-26s %9s %9s %9s %9s %9s%s\n", "phase", "start", "length", "inbound", "compute", "outbound",
	    p->disk_total_bytes ? "      disk" : "");
	for (int i = 0; i < p->num_phases; i++) {
		const Dataflow_Ring_Phase *f = &p->phases[i];
		put(&t, "  %-26s %9.4g %9.4g %9.4g %9.4g %9.4g", f->name, f->start_seconds * scale, f->seconds * scale,
		    f->inbound_seconds * scale, f->compute_seconds * scale, f->outbound_seconds * scale);
		if (p->disk_total_bytes)
			put(&t, " %9.4g", f->disk_seconds * scale);
		put(&t, "\n");
	}
	put(&t, "step %.4g %s, %.0f tokens/s, MFU %.3f (%.3g model flops per step at %.4g flop/s peak)\n",
	    p->step_seconds * scale, unit, p->tokens_per_second, p->mfu, p->model_flops, p->peak_flops);
	return t.length;
}
