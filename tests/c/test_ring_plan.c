/* The ring planner (ring_plan.h) on Llama models sized through the blocked-model interface and
 * on hand-made models: everything fits -> all resident and no transfers, with the memory map
 * and the flops recomputed here from the config; shrinking device memory -> slots and offload
 * appear, every memory map stays within its capacities and the predicted step never gets
 * faster (by more than the 2% a plan moving fewer link bytes may lose to one moving more); nothing fits -> an error whose minimum numbers are themselves enough; hostile
 * requests -> errors naming the field, never a crash. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_test.h"
#include "dataflow/dataflow.h"
#include "dataflow/models.h"
#include "dataflow/ring_plan.h"

#define GIB ((uint64_t)1 << 30)

static Dataflow_Handle *h;

/* The status and a message containing `needle`. */
static void expect_error(Dataflow_Status st, Dataflow_Status want, const char *needle, int line)
{
	if (st != want || !strstr(dataflow_last_error(), needle)) {
		fprintf(stderr, "line %d: expected status %d with '%s', got %d: %s\n", line, (int)want, needle, (int)st,
			dataflow_last_error());
		(*c_test_failures())++;
	}
}

typedef struct {
	Dataflow_Llama_Config config;
	Dataflow_Ring_Block blocks[DATAFLOW_RING_MAX_LAYERS + 2];
	Dataflow_Ring_Model model;
} Model;

static void llama_model(Model *m, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
			int64_t kv_heads, DataflowDatatype dtype)
{
	memset(m, 0, sizeof(*m));
	m->config = (Dataflow_Llama_Config){.vocab_size = vocab, .hidden_size = hidden, .intermediate_size = inter,
					   .num_layers = layers, .num_heads = heads, .num_kv_heads = kv_heads,
					   .rms_eps = 1e-5f, .rope = {.theta = 500000.0f}, .dtype = dtype};
	Dataflow_Blocked_Model *bm;
	CHECK(dataflow_llama_blocked_model_create(h, &m->config, &bm));
	CHECK(dataflow_ring_model_from_blocked(bm, m->blocks, DATAFLOW_RING_MAX_LAYERS + 2, &m->model));
	/* the workspace bound holds wherever a chunk could land */
	for (int64_t T = 1; T <= ((int64_t)1 << 17); T = T * 3 + 1)
		EXPECT_THAT(dataflow_blocked_model_workspace_bytes(bm, T) <=
			       m->model.workspace_fixed_bytes + m->model.workspace_bytes_per_token * T,
		       "workspace bound at T = %lld", (long long)T);
	dataflow_blocked_model_destroy(bm);
}

static Dataflow_Device_Profile profile(const char *name)
{
	Dataflow_Device_Profile p;
	CHECK(dataflow_device_profile_named(name, &p));
	return p;
}

/* Both phases' device sums within capacity, host within its cap, and the totals reported. */
static void expect_within_capacity(const Dataflow_Ring_Plan *p, const char *what)
{
	uint64_t sum[3] = {0, 0, 0}, host = 0;
	for (int i = 0; i < DATAFLOW_RING_DEV_NUM; i++)
		sum[p->device_phase[i]] += p->device_bytes[i];
	for (int i = 0; i < DATAFLOW_RING_HOST_NUM; i++)
		host += p->host_bytes[i];
	uint64_t training = sum[DATAFLOW_RING_BOTH] + sum[DATAFLOW_RING_TRAINING];
	uint64_t optimizer = sum[DATAFLOW_RING_BOTH] + sum[DATAFLOW_RING_OPTIMIZER];
	EXPECT_THAT(training <= p->device_capacity && optimizer <= p->device_capacity, "%s: device %llu / %llu within %llu",
	       what, (unsigned long long)training, (unsigned long long)optimizer, (unsigned long long)p->device_capacity);
	EXPECT_THAT(p->device_peak_bytes == (training > optimizer ? training : optimizer), "%s: peak %llu", what,
	       (unsigned long long)p->device_peak_bytes);
	EXPECT_THAT(host <= p->host_capacity && host == p->host_total_bytes, "%s: host %llu within %llu", what,
	       (unsigned long long)host, (unsigned long long)p->host_capacity);
	/* forward, turn and backward back to back; an optimizer after them or, overlapped, from 0 */
	double clock = 0, end = 0;
	for (int i = 0; i < p->num_phases; i++) {
		const Dataflow_Ring_Phase *f = &p->phases[i];
		int under = strstr(f->name, "previous") != NULL;
		EXPECT_THAT(under ? f->start_seconds == 0 : fabs(f->start_seconds - clock) <= 1e-12 * (1 + clock),
		       "%s: phase %s starts at %g, not %g", what, f->name, f->start_seconds, under ? 0 : clock);
		EXPECT_THAT(f->seconds >= f->compute_seconds * (1 - 1e-12) && f->seconds >= f->inbound_seconds * (1 - 1e-12) &&
			       f->seconds >= f->outbound_seconds * (1 - 1e-12) && f->seconds >= f->disk_seconds * (1 - 1e-12),
		       "%s: phase %s no shorter than any stream in it", what, f->name);
		clock += under ? 0 : f->seconds;
		end = f->start_seconds + f->seconds > end ? f->start_seconds + f->seconds : end;
	}
	EXPECT_THAT(fabs(end - p->step_seconds) <= 1e-9 * p->step_seconds && fabs(clock - end) <= 1e-9 * end,
	       "%s: the step (%g) ends with its last phase (%g, %g)", what, p->step_seconds, end, clock);
	EXPECT_THAT(fabs(p->tokens_per_second * p->step_seconds - (double)p->tokens_per_step) < 1e-6 * (double)p->tokens_per_step,
	       "%s: tokens/s", what);
}

static Dataflow_Ring_Request request(const Model *m, const Dataflow_Device_Profile *prof, int64_t seq, int64_t tokens,
				     uint64_t device, uint64_t host)
{
	return (Dataflow_Ring_Request){.model = &m->model, .seq_len = seq, .tokens_per_step = tokens,
				       .device_bytes = device, .host_bytes = host, .profile = prof};
}

/* A small fp32 Llama with room for everything: resident, no transfers, sizes and flops as the
 * config says. */
static void test_everything_fits(void)
{
	Model *m = malloc(sizeof(*m));
	llama_model(m, 1000, 64, 160, 3, 4, 2, DATAFLOW_FP32);
	Dataflow_Device_Profile prof = profile("a100-sxm");
	int64_t S = 96, tokens = 4 * 96;
	Dataflow_Ring_Request r = request(m, &prof, S, tokens, GIB, 0);
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	CHECK(dataflow_ring_plan(&r, p));
	expect_within_capacity(p, "fits");
	EXPECT_THAT(p->weight_slots == 3 && p->grad_slots == 3 && p->embedding_resident && p->head_resident,
	       "all resident: %d %d %d %d", p->weight_slots, p->grad_slots, p->embedding_resident, p->head_resident);
	EXPECT_THAT(p->optimizer == DATAFLOW_RING_OPT_DEVICE_RESIDENT, "optimizer %d", (int)p->optimizer);
	EXPECT_THAT(p->inbound_bytes == 0 && p->outbound_bytes == 0 && p->host_total_bytes == 0, "no transfers: %llu %llu",
	       (unsigned long long)p->inbound_bytes, (unsigned long long)p->outbound_bytes);
	EXPECT_THAT(p->rounds_per_step == 1 && p->save_level[0] == DATAFLOW_SAVE_ALL, "one round (%lld), save all (%d)",
	       (long long)p->rounds_per_step, (int)p->save_level[0]);
	for (int l = 0; l < 3; l++)
		EXPECT_THAT(p->activations_on_device[l], "layer %d activations on the device", l);
	for (int i = 0; i < p->num_phases; i++)
		EXPECT_THAT(p->phases[i].inbound_seconds == 0 && p->phases[i].outbound_seconds == 0, "phase %d idle links", i);

	/* sizes from the config: H 64, F 160, q 64, kv 32, aligned to 32 elements; fp32 */
	int64_t layer = 64 * 64 + 32 * 64 * 2 + 64 * 64 + 3 * 160 * 64 + 64 + 64, embed = 1000 * 64, head = 64 + 1000 * 64;
	EXPECT_THAT(p->model_param_bytes == (uint64_t)((3 * layer + embed + head) * 4), "model bytes %llu",
	       (unsigned long long)p->model_param_bytes);
	EXPECT_THAT(p->device_bytes[DATAFLOW_RING_DEV_WEIGHT_SLOTS] == (uint64_t)(3 * layer * 4), "weights %llu",
	       (unsigned long long)p->device_bytes[DATAFLOW_RING_DEV_WEIGHT_SLOTS]);
	EXPECT_THAT(p->device_bytes[DATAFLOW_RING_DEV_EDGE_BLOCKS] == (uint64_t)((embed + head) * 8), "edges %llu",
	       (unsigned long long)p->device_bytes[DATAFLOW_RING_DEV_EDGE_BLOCKS]);
	EXPECT_THAT(p->device_bytes[DATAFLOW_RING_DEV_OPTIMIZER_STATE] == (uint64_t)((embed + head + 3 * layer) * 8),
	       "m + v %llu", (unsigned long long)p->device_bytes[DATAFLOW_RING_DEV_OPTIMIZER_STATE]);
	/* MFU's flops: 6 N tokens (N: layers' matmul weights + lm_head) + 3 x causal attention */
	double N = 3.0 * (64 * 64 * 2 + 32 * 64 * 2 + 3 * 160 * 64) + 1000 * 64;
	double flops = 6 * N * (double)tokens + 3 * 3 * 4 * 64.0 * (double)(tokens / S) * (double)(S * (S + 1) / 2);
	EXPECT_THAT(fabs(p->model_flops - flops) <= 1e-9 * flops, "model flops %g vs %g", p->model_flops, flops);
	EXPECT_THAT(fabs(p->mfu - flops / (p->step_seconds * prof.peak_flops_fp32)) <= 1e-9, "mfu %g", p->mfu);

	/* the forward of a one-round, all-resident plan is pure compute: its matmuls at the chunk's
	 * rate, causal attention, memory-bound bytes (embedding included) */
	double T = (double)p->chunk_tokens, matmul = prof.peak_flops_fp32 * prof.matmul_fraction * T /
							 (T + prof.matmul_half_tokens);
	double forward = (double)tokens * m->blocks[0].memory_bytes_per_token / prof.memory_bytes_per_sec;
	for (int b = 1; b <= 3; b++)
		forward += (double)tokens * m->blocks[b].matmul_flops_per_token / matmul +
			   (double)(tokens / S) * (double)(S * (S + 1) / 2) * m->blocks[b].attention_flops_per_pair /
				   (prof.peak_flops_fp32 * prof.attention_fraction) +
			   (double)tokens * m->blocks[b].memory_bytes_per_token / prof.memory_bytes_per_sec;
	EXPECT_THAT(strcmp(p->phases[0].name, "forward") == 0 && fabs(p->phases[0].seconds - forward) <= 1e-12 * forward,
	       "forward %s %g s vs %g s", p->phases[0].name, p->phases[0].seconds, forward);

	char small[40];
	int64_t need = dataflow_ring_plan_describe(p, small, sizeof(small));
	char *text = malloc((size_t)need + 1);
	EXPECT_THAT(dataflow_ring_plan_describe(p, text, need + 1) == need && (int64_t)strlen(text) == need, "describe length");
	EXPECT_THAT(strlen(small) == sizeof(small) - 1 && strncmp(small, text, sizeof(small) - 1) == 0, "truncated describe");
	EXPECT_THAT(strstr(text, "MFU") && strstr(text, "weight slots"), "describe: %s", text);
	free(text);
	free(p);
	free(m);
}

/* Llama-3-8B (bf16) at 8k from a roomy device down to nothing: every plan within its caps,
 * never faster on less memory, slots and offload appear; the first failure's minimum is enough. */
static void test_shrinking_device(const Model *m, const Dataflow_Device_Profile *prof)
{
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	double last = 0;
	int saw_slots = 0, saw_offload = 0, saw_resident = 0;
	uint64_t device = 160 * GIB;
	for (; device >= GIB / 4; device = device * 3 / 4) {
		Dataflow_Ring_Request r = request(m, prof, 8192, 4 * 8192, device, 512 * GIB);
		Dataflow_Status st = dataflow_ring_plan(&r, p);
		if (st != DATAFLOW_OK) {
			expect_error(st, DATAFLOW_ERR_OUT_OF_MEMORY, "GiB device", __LINE__);
			EXPECT_THAT(p->min_device_bytes > device, "minimum %llu above the cap %llu",
			       (unsigned long long)p->min_device_bytes, (unsigned long long)device);
			r.device_bytes = p->min_device_bytes;
			CHECK(dataflow_ring_plan(&r, p));
			expect_within_capacity(p, "at the minimum");
			EXPECT_THAT(p->step_seconds >= last * (1 - DATAFLOW_RING_TIE_MARGIN),
				    "minimum plan %g no faster than %g", p->step_seconds, last);
			break;
		}
		expect_within_capacity(p, "shrinking");
		EXPECT_THAT(p->step_seconds >= last * (1 - DATAFLOW_RING_TIE_MARGIN), "at %.2f GiB: %g s < %g s",
			    (double)device / GIB, p->step_seconds, last);
		last = p->step_seconds;
		if (p->optimizer == DATAFLOW_RING_OPT_DEVICE_RESIDENT) /* it updates every block in place */
			EXPECT_THAT(p->weight_slots == 32 && p->grad_slots == 32 && p->embedding_resident && p->head_resident,
			       "resident optimizer with %d/%d slots", p->weight_slots, p->grad_slots);
		saw_resident |= p->weight_slots == 32 && p->optimizer == DATAFLOW_RING_OPT_DEVICE_RESIDENT;
		saw_slots |= p->weight_slots < 32;
		saw_offload |= !p->activations_on_device[0];
		if (p->weight_slots < 32)
			EXPECT_THAT(p->inbound_bytes > 0, "streamed weights come in");
	}
	EXPECT_THAT(device >= GIB / 4, "some capacity fails");
	EXPECT_THAT(saw_resident && saw_slots && saw_offload, "resident %d, slots %d, offload %d", saw_resident, saw_slots,
	       saw_offload);
	free(p);
}

/* 24 GiB device, too little host: the error's host minimum is enough. */
static void test_host_too_small(const Model *m, const Dataflow_Device_Profile *prof)
{
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	Dataflow_Ring_Request r = request(m, prof, 8192, 8 * 8192, 24 * GIB, 60 * GIB);
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "GiB host", __LINE__);
	EXPECT_THAT(p->min_host_bytes > 60 * GIB, "host minimum %llu", (unsigned long long)p->min_host_bytes);
	r.host_bytes = p->min_host_bytes;
	CHECK(dataflow_ring_plan(&r, p));
	expect_within_capacity(p, "host minimum");
	r.master_weights = 1; /* fp32 master copies need more host still */
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "host", __LINE__);
	free(p);
}

/* Lean optimizer state: issue 28's llama3-8b at 8k under 24 GiB device and 48 GiB host fits with
 * 8-bit m and v only; the state's host bytes are 2 per parameter plus a scale per 256. */
static void test_state_precision(const Model *m, const Dataflow_Device_Profile *prof)
{
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	Dataflow_Ring_Request r = request(m, prof, 8192, 64 * 8192, 24 * GIB, 48 * GIB);
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "GiB host", __LINE__);
	r.optimizer_state = DATAFLOW_OPTIMIZER_STATE_8BIT;
	CHECK(dataflow_ring_plan(&r, p));
	expect_within_capacity(p, "8-bit state");
	double params = 0;
	for (int b = 0; b < m->model.num_blocks; b++)
		params += (double)m->blocks[b].sizes.bytes[DATAFLOW_BLOCK_GRAD] / 4;
	double state = (double)(p->host_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] + p->device_bytes[DATAFLOW_RING_DEV_OPTIMIZER_STATE]);
	EXPECT_THAT(p->optimizer_state == DATAFLOW_OPTIMIZER_STATE_8BIT && state / params > 2.0 && state / params < 2.04,
		    "8-bit state: %.4f bytes per parameter", state / params);
	r.optimizer_state = (Dataflow_Optimizer_State)3;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "optimizer_state", __LINE__);
	EXPECT_THAT(dataflow_optimizer_state_bytes(DATAFLOW_OPTIMIZER_STATE_8BIT, 257) == 320 + 8 &&
			    dataflow_optimizer_state_bytes(DATAFLOW_OPTIMIZER_STATE_BF16, 3) == 6 &&
			    dataflow_optimizer_state_bytes((Dataflow_Optimizer_State)-1, 3) == -1,
		    "%s", "dataflow_optimizer_state_bytes");
	free(p);
}

/* The disk tier: issue 28's llama3-8b at 8k, 8-bit state, 24 GiB device and 24 GiB host fits with
 * a 1 TiB disk (optimizer state first); limited to optimizer state it does not; a disk too small
 * names what it needs; bad disk fields are named. */
static void test_disk_tier(const Model *m, const Dataflow_Device_Profile *prof)
{
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	Dataflow_Ring_Request r = request(m, prof, 8192, 64 * 8192, 24 * GIB, 24 * GIB);
	r.optimizer_state = DATAFLOW_OPTIMIZER_STATE_8BIT;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "GiB host", __LINE__);
	r.disk_bytes = 1024 * GIB;
	CHECK(dataflow_ring_plan(&r, p));
	expect_within_capacity(p, "disk tier");
	uint64_t disk = 0;
	for (int i = 0; i < DATAFLOW_RING_HOST_NUM; i++)
		disk += p->disk_bytes[i];
	EXPECT_THAT(disk == p->disk_total_bytes && disk <= p->disk_capacity && p->disk_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] > 0 &&
			    p->host_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] == 0 && p->host_bytes[DATAFLOW_RING_HOST_DISK_STAGING] > 0,
		    "disk tier: %llu bytes on disk, optimizer state there", (unsigned long long)disk);
	EXPECT_THAT(p->disk_read_bytes >= p->disk_bytes[DATAFLOW_RING_HOST_OPTIMIZER_STATE] &&
			    p->disk_bytes_per_sec == DATAFLOW_RING_DISK_DEFAULT_BYTES_PER_SEC,
		    "disk reads %llu, rate %g", (unsigned long long)p->disk_read_bytes, p->disk_bytes_per_sec);
	r.disk_kinds = DATAFLOW_RING_DISK_OPTIMIZER_STATE;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "host", __LINE__);
	r.disk_kinds = 0;
	r.disk_bytes = GIB;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "on disk", __LINE__);
	r.disk_kinds = 8;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "disk_kinds", __LINE__);
	r.disk_kinds = 0;
	r.disk_bytes_per_sec = NAN;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "disk_bytes_per_sec", __LINE__);
	free(p);
}

/* A hand-made model: embedding, `layers` identical layers, head. */
static void synthetic(Model *m, int layers, int64_t bytes)
{
	memset(m, 0, sizeof(*m));
	for (int b = 0; b < layers + 2; b++) {
		Dataflow_Ring_Block *k = &m->blocks[b];
		k->sizes.role = b == 0 ? DATAFLOW_BLOCK_EMBEDDING : b == layers + 1 ? DATAFLOW_BLOCK_HEAD : DATAFLOW_BLOCK_LAYER;
		for (int kind = 0; kind < DATAFLOW_BLOCK_NUM_KINDS; kind++)
			k->sizes.bytes[kind] = kind == DATAFLOW_BLOCK_PARAM ? bytes / 2 : bytes;
		k->sizes.saved_bytes_per_token[DATAFLOW_SAVE_ALL] = 100;
		k->matmul_flops_per_token = 1e6;
		k->attention_flops_per_pair = 1e3;
		k->memory_bytes_per_token = 1e3;
	}
	m->model.num_blocks = layers + 2;
	m->model.blocks = m->blocks;
	m->model.hidden_bytes_per_token = 64;
}

static void test_hostile(void)
{
	Model *m = malloc(sizeof(*m));
	Dataflow_Device_Profile prof = profile("h100-sxm");
	Dataflow_Ring_Plan *p = malloc(sizeof(*p));
	synthetic(m, 4, 1 << 20);
	Dataflow_Ring_Request r = request(m, &prof, 128, 512, GIB, GIB);
	CHECK(dataflow_ring_plan(&r, p));
	expect_error(dataflow_ring_plan(NULL, p), DATAFLOW_ERR_INVALID_ARGUMENT, "request", __LINE__);
	expect_error(dataflow_ring_plan(&r, NULL), DATAFLOW_ERR_INVALID_ARGUMENT, "plan", __LINE__);

	struct {
		const char *needle;
		Dataflow_Ring_Request r;
	} bad[] = {
		{"seq_len", request(m, &prof, 0, 512, GIB, GIB)},
		{"seq_len", request(m, &prof, -5, 512, GIB, GIB)},
		{"tokens_per_step", request(m, &prof, 128, 500, GIB, GIB)},
		{"tokens_per_step", request(m, &prof, 128, 64, GIB, GIB)},
		{"tokens_per_step", request(m, &prof, 1, (int64_t)1 << 62, GIB, GIB)},
		{"device_bytes", request(m, &prof, 128, 512, 0, GIB)},
		{"profile", request(m, NULL, 128, 512, GIB, GIB)},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error(dataflow_ring_plan(&bad[i].r, p), DATAFLOW_ERR_INVALID_ARGUMENT, bad[i].needle, __LINE__);
	Dataflow_Ring_Request q = r;
	q.model = NULL;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "model", __LINE__);
	q = r;
	q.h2d_bytes_per_sec = -1;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "h2d_bytes_per_sec", __LINE__);
	q = r;
	q.d2h_bytes_per_sec = NAN;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "d2h_bytes_per_sec", __LINE__);
	q = r;
	q.host_adamw_bytes_per_sec = INFINITY;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "host_adamw_bytes_per_sec", __LINE__);
	q = r;
	q.master_weights = 7;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "master_weights", __LINE__);
	Dataflow_Device_Profile broken = prof;
	broken.attention_fraction = NAN;
	q = r;
	q.profile = &broken;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "attention_fraction", __LINE__);
	broken = prof;
	broken.matmul_fraction = 1.5;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "matmul_fraction", __LINE__);
	broken = prof;
	broken.matmul_half_tokens = -1;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "matmul_half_tokens", __LINE__);
	broken = prof;
	broken.h2d_bytes_per_sec = -3;
	expect_error(dataflow_ring_plan(&q, p), DATAFLOW_ERR_INVALID_ARGUMENT, "h2d_bytes_per_sec", __LINE__);

	/* 0 layers, too many, a wrong role, negative sizes, NaN flops */
	m->model.num_blocks = 2;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "num_blocks", __LINE__);
	m->model.num_blocks = DATAFLOW_RING_MAX_LAYERS + 3;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "num_blocks", __LINE__);
	synthetic(m, 4, 1 << 20);
	m->blocks[2].sizes.role = DATAFLOW_BLOCK_HEAD;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "role", __LINE__);
	synthetic(m, 4, 1 << 20);
	m->blocks[3].sizes.saved_bytes_per_token[1] = -1;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "block 3", __LINE__);
	synthetic(m, 4, 1 << 20);
	m->blocks[1].attention_flops_per_pair = NAN;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "block 1", __LINE__);
	synthetic(m, 4, 1 << 20);
	m->model.hidden_bytes_per_token = 0;
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "hidden_bytes_per_token", __LINE__);
	synthetic(m, 4, 1 << 20);
	r.master_weights = 1; /* the hand-made model has a MASTER kind */
	CHECK(dataflow_ring_plan(&r, p));

	/* overflow-sized: the largest model of the largest blocks, longest steps; no wrap, no crash */
	synthetic(m, DATAFLOW_RING_MAX_LAYERS, INT64_MAX / 2);
	r = request(m, &prof, (int64_t)1 << 31, (int64_t)1 << 40, UINT64_MAX, UINT64_MAX);
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_OUT_OF_MEMORY, "nothing fits", __LINE__);
	EXPECT_THAT(p->min_device_bytes > 0, "a minimum is reported");

	/* the blocked model's view with too small an array */
	Dataflow_Llama_Config c = {.vocab_size = 100, .hidden_size = 32, .intermediate_size = 64, .num_layers = 2,
				   .num_heads = 2, .num_kv_heads = 1, .rms_eps = 1e-5f, .rope = {.theta = 1e4f},
				   .dtype = DATAFLOW_FP32};
	Dataflow_Blocked_Model *bm;
	CHECK(dataflow_llama_blocked_model_create(h, &c, &bm));
	expect_error(dataflow_ring_model_from_blocked(bm, m->blocks, 3, &m->model), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "capacity", __LINE__);
	expect_error(dataflow_ring_model_from_blocked(NULL, m->blocks, 3, &m->model), DATAFLOW_ERR_INVALID_ARGUMENT,
		     "required", __LINE__);
	CHECK(dataflow_ring_model_from_blocked(bm, m->blocks, 4, &m->model));
	r = request(m, &prof, 16, 32, GIB, GIB);
	r.master_weights = 1; /* an fp32 model has no master copy */
	expect_error(dataflow_ring_plan(&r, p), DATAFLOW_ERR_INVALID_ARGUMENT, "master_weights", __LINE__);
	dataflow_blocked_model_destroy(bm);
	free(p);
	free(m);
}

static void test_profiles(void)
{
	int n = 0;
	for (const char *name; (name = dataflow_device_profile_name(n)); n++) {
		Dataflow_Device_Profile p = profile(name);
		CHECK(dataflow_device_profile_check(&p));
		EXPECT_THAT(strcmp(p.name, name) == 0 && p.source && strlen(p.source) > 20, "profile %s has a source", name);
	}
	EXPECT_THAT(n >= 2, "built-in profiles: %d", n);
	Dataflow_Device_Profile p;
	expect_error(dataflow_device_profile_named("tpu-v9", &p), DATAFLOW_ERR_INVALID_ARGUMENT, "h100-sxm", __LINE__);
	expect_error(dataflow_device_profile_named(NULL, &p), DATAFLOW_ERR_INVALID_ARGUMENT, "required", __LINE__);
}

int main(void)
{
	Dataflow_Handle_Config hc = {.num_streams = 1, .device_memory_bytes = 1u << 20, .options = "threads=1"};
	CHECK(dataflow_handle_create("host", &hc, &h));
	test_everything_fits();
	Model *llama3_8b = malloc(sizeof(*llama3_8b));
	llama_model(llama3_8b, 128256, 4096, 14336, 32, 32, 8, DATAFLOW_BF16);
	Dataflow_Device_Profile h100 = profile("h100-sxm");
	test_shrinking_device(llama3_8b, &h100);
	test_host_too_small(llama3_8b, &h100);
	test_state_precision(llama3_8b, &h100);
	test_disk_tier(llama3_8b, &h100);
	free(llama3_8b);
	test_hostile();
	test_profiles();
	dataflow_handle_destroy(h);
	if (*c_test_failures()) {
		fprintf(stderr, "%d failure(s)\n", *c_test_failures());
		return 1;
	}
	printf("ring plan: ok\n");
	return 0;
}
