/* The Llama's blocks (blocked_model.h) driven from memory this program owns: each block's
 * weights copied out of an all-resident model into fresh allocations, with gradients,
 * activations (one input buffer per layer, saved activations per layer at a save level),
 * dacts and workspace of its own, as a ring would place them. At every save level the
 * forward and the split backward must reproduce the token losses and every block's gradients
 * of the training engine (the ring executor of the all-resident plan over the resident
 * model's blocks, resident_training.h) bit for bit, and the per-block calls must not wait for
 * the device.
 * Untied fp32, and tied bf16 (the head reads the embedding block and adds into its gradient).
 * Long sequences: a document split into chunks, each layer's chunks attending over a K/V
 * context and the backward accumulating its dK/dV over the chunks in reverse, trains as the
 * executor over a resident model on the whole document (fp32; three steps at the three save
 * levels): losses and
 * every gradient within 1e-5, weights after AdamW as trained_weights_close. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_test.h"
#include "resident_training.h"
#include "dataflow/dataflow.h"
#include "dataflow/models.h"
#include "dataflow/ops.h"

enum { T = 13, DOCS = 2, FIRST_DOC = 8 };

static Dataflow_Handle *h;

static void *device_zeros(int64_t bytes)
{
	void *p;
	CHECK(dataflow_alloc_mem(h, (uint64_t)bytes, &p));
	CHECK(dataflow_set_mem(h, 0, p, 0, (uint64_t)bytes));
	return p;
}

static void *to_host(const void *dev, int64_t bytes)
{
	void *p = malloc((size_t)bytes);
	CHECK(dataflow_submit_outbound_transfer(h, 0, p, dev, (uint64_t)bytes));
	CHECK(dataflow_sync_stream(h, 0));
	return p;
}

static void to_device(void *dev, const void *host, int64_t bytes)
{
	CHECK(dataflow_submit_inbound_transfer(h, 0, dev, host, (uint64_t)bytes));
	CHECK(dataflow_sync_stream(h, 0));
}

static float uniform(unsigned *state)
{
	*state = *state * 1664525u + 1013904223u;
	return (float)(*state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Random weights in every tensor of the resident model (padding stays zero). */
static void init_weights(Dataflow_Llama *m, unsigned seed)
{
	for (int i = 0; i < dataflow_llama_num_tensors(m); i++) {
		Dataflow_Llama_Tensor t;
		CHECK(dataflow_llama_tensor(m, i, DATAFLOW_BLOCK_PARAM, &t));
		float *v = malloc((size_t)t.numel * 4);
		void *converted = malloc((size_t)t.numel * 4);
		for (int64_t j = 0; j < t.numel; j++)
			v[j] = t.ndim == 1 ? 1.0f + 0.2f * uniform(&seed) : 0.08f * uniform(&seed);
		CHECK(dataflow_convert(t.dtype, converted, DATAFLOW_FP32, v, t.numel));
		to_device(t.ptr, converted, t.numel * (int64_t)dataflow_datatype_size(t.dtype));
		free(v);
		free(converted);
	}
}

/* A packed batch of n tokens in docs documents: a host buffer to fill (*hb points into it). */
static int32_t *host_batch(int64_t n, int64_t docs, Dataflow_Llama_Batch *hb)
{
	int32_t *host = malloc((size_t)dataflow_batch_buffer_numel(n, docs, 1) * 4);
	CHECK(dataflow_batch_from_buffer(host, n, docs, 1, hb));
	return host;
}

/* The filled host buffer in device memory (one transfer). */
static Dataflow_Llama_Batch upload(const int32_t *host, int64_t n, int64_t docs, void **buffer)
{
	int64_t numel = dataflow_batch_buffer_numel(n, docs, 1);
	Dataflow_Llama_Batch b;
	CHECK(dataflow_alloc_mem(h, (uint64_t)numel * 4, buffer));
	to_device(*buffer, host, numel * 4);
	CHECK(dataflow_batch_from_buffer(*buffer, n, docs, 1, &b));
	return b;
}

/* Two documents of FIRST_DOC and T - FIRST_DOC tokens, in one packed buffer (*host, the
 * caller frees it), one transfer. */
static Dataflow_Llama_Batch upload_batch(int64_t vocab, void **buffer, int32_t **host_buffer)
{
	Dataflow_Llama_Batch hb;
	int32_t *host = host_batch(T, DOCS, &hb);
	int32_t *tokens = (int32_t *)hb.tokens, *labels = (int32_t *)hb.labels, *positions = (int32_t *)hb.positions;
	int32_t *cu = (int32_t *)hb.cu_seqlens;
	cu[0] = 0, cu[1] = FIRST_DOC, cu[2] = T;
	for (int t = 0; t < T; t++) {
		tokens[t] = (int32_t)((t * 37 + 11) % vocab);
		positions[t] = t < FIRST_DOC ? t : t - FIRST_DOC;
	}
	for (int t = 0; t < T; t++) /* next token in the same document; -100 at each document's end */
		labels[t] = t == FIRST_DOC - 1 || t == T - 1 ? DATAFLOW_LLAMA_IGNORE_INDEX : tokens[t + 1];
	labels[3] = DATAFLOW_LLAMA_IGNORE_INDEX;
	*host_buffer = host;
	return upload(host, T, DOCS, buffer);
}

/* Caller-owned activations for one chunk of n tokens at a level. */
typedef struct {
	void **x;          /* [L + 1]: the embedding's output, then each layer's */
	void **saved;      /* [L] */
	void *recomputed, *head_saved, *dacts, *dres[2], *workspace;
	float *token_losses;
} Acts;

static Acts alloc_acts(const Dataflow_Blocked_Model *bm, Dataflow_Save_Level level, int64_t n)
{
	const Dataflow_Llama_Config *c = dataflow_blocked_model_config(bm);
	int L = (int)c->num_layers;
	int64_t hidden = n * c->hidden_size * (c->dtype == DATAFLOW_BF16 ? 2 : 4);
	int64_t saved, recomputed, dacts, head_saved, head_dacts;
	CHECK(dataflow_block_acts_bytes(bm, 1, level, n, &saved, &recomputed, &dacts));
	CHECK(dataflow_block_acts_bytes(bm, L + 1, level, n, &head_saved, NULL, &head_dacts));
	Acts a = {.x = calloc((size_t)L + 1, sizeof(void *)), .saved = calloc((size_t)L, sizeof(void *))};
	for (int l = 0; l <= L; l++)
		a.x[l] = device_zeros(hidden);
	for (int l = 0; l < L; l++)
		a.saved[l] = saved ? device_zeros(saved) : NULL;
	a.recomputed = recomputed ? device_zeros(recomputed) : NULL;
	a.head_saved = device_zeros(head_saved);
	a.dacts = device_zeros(dacts > head_dacts ? dacts : head_dacts);
	a.dres[0] = device_zeros(hidden);
	a.dres[1] = device_zeros(hidden);
	a.workspace = device_zeros(dataflow_blocked_model_workspace_bytes(bm, n));
	a.token_losses = device_zeros(n * 4);
	return a;
}

static void free_acts(const Dataflow_Blocked_Model *bm, Acts *a)
{
	int L = (int)dataflow_blocked_model_config(bm)->num_layers;
	for (int l = 0; l <= L; l++)
		dataflow_free_mem(h, a->x[l]);
	for (int l = 0; l < L; l++)
		if (a->saved[l])
			dataflow_free_mem(h, a->saved[l]);
	void *rest[] = {a->recomputed, a->head_saved, a->dacts, a->dres[0], a->dres[1], a->workspace, a->token_losses};
	for (size_t i = 0; i < sizeof(rest) / sizeof(rest[0]); i++)
		if (rest[i])
			dataflow_free_mem(h, rest[i]);
	free(a->x);
	free(a->saved);
}

/* The arguments of block b's calls in this program's placement. */
static Dataflow_Block_Args args_for(const Dataflow_Blocked_Model *bm, const Dataflow_Llama_Batch *batch,
				    Dataflow_Save_Level level, const Acts *acts, const Dataflow_Block_Memory *mem, int b)
{
	const Dataflow_Llama_Config *c = dataflow_blocked_model_config(bm);
	int L = (int)c->num_layers;
	Dataflow_Block_Args a = {.batch = batch, .level = level, .dacts = acts->dacts, .workspace = acts->workspace};
	if (b == 0) {
		a.y = acts->x[0];
	} else if (b <= L) {
		a.x = acts->x[b - 1];
		a.y = acts->x[b];
		a.saved = acts->saved[b - 1];
		a.recomputed = acts->recomputed;
	} else {
		a.x = acts->x[L];
		a.saved = acts->head_saved;
		a.tied = c->tie_embeddings ? &mem[0] : NULL;
	}
	return a;
}

/* Forward with the loss, then backward_x / backward_w from the head down; only submits. */
static void drive(const Dataflow_Blocked_Model *bm, const Dataflow_Llama_Batch *batch, Dataflow_Save_Level level,
		  const Acts *acts, const Dataflow_Block_Memory *mem, float loss_scale)
{
	int nb = dataflow_blocked_model_num_blocks(bm);
	for (int b = 0; b < nb; b++) {
		Dataflow_Block_Args a = args_for(bm, batch, level, acts, mem, b);
		if (b == nb - 1) {
			a.token_losses = acts->token_losses;
			a.loss_scale = loss_scale;
		}
		CHECK(dataflow_block_forward(bm, b, 0, &mem[b], &a));
	}
	int which = 0;
	for (int b = nb - 1; b >= 0; b--) {
		Dataflow_Block_Args a = args_for(bm, batch, level, acts, mem, b);
		a.dy = b == nb - 1 ? NULL : acts->dres[which];
		a.dx = acts->dres[b == nb - 1 ? which : !which];
		if (b < nb - 1)
			which = !which;
		CHECK(dataflow_block_recompute(bm, b, 0, &mem[b], &a));
		CHECK(dataflow_block_backward_x(bm, b, 0, &mem[b], &a));
		CHECK(dataflow_block_backward_w(bm, b, 0, &mem[b], &a));
	}
}

static int same_bytes(const char *what, const void *got, const void *want, int64_t bytes, Dataflow_Save_Level level)
{
	if (memcmp(got, want, (size_t)bytes) == 0)
		return 1;
	fprintf(stderr, "save level %d: %s differs from the resident model's\n", (int)level, what);
	return 0;
}

static int run(const Dataflow_Llama_Config *config, const char *name)
{
	Dataflow_Llama *resident;
	CHECK(dataflow_llama_create(h, config, &resident));
	init_weights(resident, 12345u);
	void *batch_buffer;
	int32_t *host_buffer;
	Dataflow_Llama_Batch batch = upload_batch(config->vocab_size, &batch_buffer, &host_buffer);
	float loss_scale = 1.0f / 10; /* labelled tokens */
	Dataflow_Ring_Executor *engine = resident_executor(h, resident, T, T, DATAFLOW_SAVE_ALL);
	float *want_losses = malloc(T * 4);
	memcpy(want_losses, resident_loss_backward(engine, host_buffer, T, DOCS, loss_scale), T * 4);
	dataflow_ring_executor_destroy(engine);
	free(host_buffer);

	/* this program's copy of every block: the weights copied, gradients of its own */
	const Dataflow_Blocked_Model *bm = dataflow_llama_blocked_model(resident);
	int nb = dataflow_blocked_model_num_blocks(bm);
	Dataflow_Block_Memory *mine = calloc((size_t)nb, sizeof(Dataflow_Block_Memory));
	void **want_grads = calloc((size_t)nb, sizeof(void *));
	Dataflow_Block_Sizes *sizes = calloc((size_t)nb, sizeof(Dataflow_Block_Sizes));
	for (int b = 0; b < nb; b++) {
		Dataflow_Block_Memory theirs;
		CHECK(dataflow_llama_block(resident, b, &theirs));
		CHECK(dataflow_blocked_model_block_sizes(bm, b, &sizes[b]));
		void *weights = to_host(theirs.param, sizes[b].bytes[DATAFLOW_BLOCK_PARAM]);
		mine[b].param = device_zeros(sizes[b].bytes[DATAFLOW_BLOCK_PARAM]);
		to_device(mine[b].param, weights, sizes[b].bytes[DATAFLOW_BLOCK_PARAM]);
		free(weights);
		mine[b].grad = device_zeros(sizes[b].bytes[DATAFLOW_BLOCK_GRAD]);
		want_grads[b] = to_host(theirs.grad, sizes[b].bytes[DATAFLOW_BLOCK_GRAD]);
	}

	int ok = 1;
	for (int level = 0; level < DATAFLOW_NUM_SAVE_LEVELS; level++) {
		Acts acts = alloc_acts(bm, (Dataflow_Save_Level)level, T);
		for (int b = 0; b < nb; b++)
			CHECK(dataflow_set_mem(h, 0, mine[b].grad, 0, (uint64_t)sizes[b].bytes[DATAFLOW_BLOCK_GRAD]));
		uint64_t syncs = dataflow_handle_host_syncs(h);
		drive(bm, &batch, (Dataflow_Save_Level)level, &acts, mine, loss_scale);
		if (dataflow_handle_host_syncs(h) != syncs) {
			fprintf(stderr, "the per-block calls waited for the device\n");
			ok = 0;
		}
		float *losses = to_host(acts.token_losses, T * 4);
		ok &= same_bytes("the token losses", losses, want_losses, T * 4, (Dataflow_Save_Level)level);
		free(losses);
		for (int b = 0; b < nb; b++) {
			char what[64];
			snprintf(what, sizeof(what), "block %d's gradient", b);
			void *grads = to_host(mine[b].grad, sizes[b].bytes[DATAFLOW_BLOCK_GRAD]);
			ok &= same_bytes(what, grads, want_grads[b], sizes[b].bytes[DATAFLOW_BLOCK_GRAD],
					 (Dataflow_Save_Level)level);
			free(grads);
		}
		free_acts(bm, &acts);
	}
	float want_loss = dataflow_batch_loss(want_losses, T, loss_scale);
	printf("c_llama_block %s: %s (loss %.6f, %d blocks, 3 save levels)\n", name, ok ? "ok" : "MISMATCH", want_loss,
	       nb);
	for (int b = 0; b < nb; b++) {
		dataflow_free_mem(h, mine[b].param);
		dataflow_free_mem(h, mine[b].grad);
		free(want_grads[b]);
	}
	free(mine);
	free(want_grads);
	free(sizes);
	free(want_losses);
	dataflow_free_mem(h, batch_buffer);
	dataflow_llama_destroy(resident);
	return ok;
}

/* ---- long sequences in chunks ---- */

enum { DOC = 150, CHUNKS = 3 };
static const int64_t chunk_len[CHUNKS] = {64, 50, 36}; /* across attention's 64-token tiles */

/* Per layer, the document's K/V context and its fp32 gradients; per chunk, {0, past + T}. */
typedef struct {
	void **k, **v;
	float **dk, **dv;
	int64_t kv_bytes, grad_bytes;
	int32_t *cu_k[CHUNKS];
	int64_t past[CHUNKS];
} Context;

static Context alloc_context(const Dataflow_Llama_Config *c)
{
	int L = (int)c->num_layers;
	int64_t rows = DOC * c->num_kv_heads * c->head_dim;
	Context x = {.k = calloc((size_t)L, sizeof(void *)), .v = calloc((size_t)L, sizeof(void *)),
		     .dk = calloc((size_t)L, sizeof(float *)), .dv = calloc((size_t)L, sizeof(float *)),
		     .kv_bytes = rows * (int64_t)dataflow_datatype_size(c->dtype), .grad_bytes = rows * 4};
	for (int l = 0; l < L; l++) {
		x.k[l] = device_zeros(x.kv_bytes);
		x.v[l] = device_zeros(x.kv_bytes);
		x.dk[l] = device_zeros(x.grad_bytes);
		x.dv[l] = device_zeros(x.grad_bytes);
	}
	for (int64_t c = 0, past = 0; c < CHUNKS; past += chunk_len[c++]) {
		int32_t cu[2] = {0, (int32_t)(past + chunk_len[c])};
		x.past[c] = past;
		x.cu_k[c] = device_zeros(8);
		to_device(x.cu_k[c], cu, 8);
	}
	return x;
}

static void free_context(Context *x, int L)
{
	for (int l = 0; l < L; l++) {
		dataflow_free_mem(h, x->k[l]);
		dataflow_free_mem(h, x->v[l]);
		dataflow_free_mem(h, x->dk[l]);
		dataflow_free_mem(h, x->dv[l]);
	}
	for (int c = 0; c < CHUNKS; c++)
		dataflow_free_mem(h, x->cu_k[c]);
	free(x->k), free(x->v), free(x->dk), free(x->dv);
}

/* One document of DOC tokens: whole (*whole_host, a host buffer the caller frees) and, in device
 * memory, as CHUNKS chunks, positions continuing and
 * each chunk's last label the next chunk's first token. */
static void upload_document(int64_t vocab, int32_t **whole_host, Dataflow_Llama_Batch chunks[CHUNKS],
			    void *chunk_buffers[CHUNKS])
{
	int32_t tokens[DOC], labels[DOC];
	for (int t = 0; t < DOC; t++)
		tokens[t] = (int32_t)((t * 29 + 7) % vocab);
	for (int t = 0; t < DOC; t++)
		labels[t] = t == DOC - 1 || t % 17 == 5 ? DATAFLOW_LLAMA_IGNORE_INDEX : tokens[t + 1];
	for (int c = -1, start = 0; c < CHUNKS; c++) {
		int64_t n = c < 0 ? DOC : chunk_len[c];
		Dataflow_Llama_Batch hb;
		int32_t *host = host_batch(n, 1, &hb);
		for (int t = 0; t < n; t++) {
			((int32_t *)hb.tokens)[t] = tokens[start + t];
			((int32_t *)hb.labels)[t] = labels[start + t];
			((int32_t *)hb.positions)[t] = start + t;
		}
		((int32_t *)hb.cu_seqlens)[0] = 0, ((int32_t *)hb.cu_seqlens)[1] = (int32_t)n;
		if (c < 0) {
			*whole_host = host;
		} else {
			chunks[c] = upload(host, n, 1, &chunk_buffers[c]), start += (int)n;
			free(host);
		}
	}
}

/* Forward (layer-major over chunks, each layer's chunks over its context), the head per chunk,
 * then each layer's chunks in reverse with the context's gradients zeroed first; only submits. */
static void drive_chunks(const Dataflow_Blocked_Model *bm, const Dataflow_Llama_Batch *batches,
			 Dataflow_Save_Level level, Acts *acts, const Dataflow_Block_Memory *mem, Context *x,
			 float loss_scale)
{
	int nb = dataflow_blocked_model_num_blocks(bm), L = nb - 2;
	for (int b = 0; b <= L; b++) {
		for (int c = 0; c < CHUNKS; c++) {
			Dataflow_Block_Args a = args_for(bm, &batches[c], level, &acts[c], mem, b);
			Dataflow_Block_KV kv = {b ? x->k[b - 1] : NULL, b ? x->v[b - 1] : NULL, x->past[c], x->cu_k[c],
						NULL, NULL};
			a.kv = b ? &kv : NULL;
			CHECK(dataflow_block_forward(bm, b, 0, &mem[b], &a));
		}
	}
	for (int c = 0; c < CHUNKS; c++) {
		Dataflow_Block_Args a = args_for(bm, &batches[c], level, &acts[c], mem, nb - 1);
		a.token_losses = acts[c].token_losses;
		a.loss_scale = loss_scale;
		a.dx = acts[c].dres[0];
		CHECK(dataflow_block_forward(bm, nb - 1, 0, &mem[nb - 1], &a));
		CHECK(dataflow_block_backward_x(bm, nb - 1, 0, &mem[nb - 1], &a));
		CHECK(dataflow_block_backward_w(bm, nb - 1, 0, &mem[nb - 1], &a));
	}
	int which = 0;
	for (int b = L; b >= 1; b--, which = !which) {
		CHECK(dataflow_set_mem(h, 0, x->dk[b - 1], 0, (uint64_t)x->grad_bytes));
		CHECK(dataflow_set_mem(h, 0, x->dv[b - 1], 0, (uint64_t)x->grad_bytes));
		for (int c = CHUNKS - 1; c >= 0; c--) {
			Dataflow_Block_Args a = args_for(bm, &batches[c], level, &acts[c], mem, b);
			Dataflow_Block_KV kv = {x->k[b - 1], x->v[b - 1], x->past[c], x->cu_k[c], x->dk[b - 1], x->dv[b - 1]};
			a.kv = &kv;
			a.dy = acts[c].dres[which];
			a.dx = acts[c].dres[!which];
			CHECK(dataflow_block_recompute(bm, b, 0, &mem[b], &a));
			CHECK(dataflow_block_backward_x(bm, b, 0, &mem[b], &a));
			CHECK(dataflow_block_backward_w(bm, b, 0, &mem[b], &a));
		}
	}
	for (int c = 0; c < CHUNKS; c++) {
		Dataflow_Block_Args a = args_for(bm, &batches[c], level, &acts[c], mem, 0);
		a.dy = acts[c].dres[which];
		CHECK(dataflow_block_backward_w(bm, 0, 0, &mem[0], &a));
	}
}

/* max |got - want| <= tol * max |want| over n floats of device memory */
static int close_to(const char *what, int step, const void *got, const void *want, int64_t n, double tol)
{
	float *g = to_host(got, n * 4), *w = to_host(want, n * 4);
	double diff = 0, scale = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = fabs((double)g[i] - w[i]);
		diff = d > diff || d != d ? d : diff;
		scale = fabs(w[i]) > scale ? fabs(w[i]) : scale;
	}
	free(g), free(w);
	if (diff <= tol * scale)
		return 1;
	fprintf(stderr, "chunks, step %d: %s differs by %g (max |want| %g)\n", step, what, diff, scale);
	return 0;
}

/* Every block's gradients close_to within 1e-5. */
static int grads_close(const Dataflow_Blocked_Model *bm, int step, const Dataflow_Block_Memory *got,
		       const Dataflow_Block_Memory *want)
{
	int ok = 1;
	for (int b = 0; b < dataflow_blocked_model_num_blocks(bm); b++) {
		Dataflow_Block_Sizes sizes;
		CHECK(dataflow_blocked_model_block_sizes(bm, b, &sizes));
		char what[64];
		snprintf(what, sizeof(what), "block %d's gradient", b);
		ok &= close_to(what, step, got[b].grad, want[b].grad, sizes.numel, 1e-5);
	}
	return ok;
}

/* fp32 weights after `steps` AdamW steps of lr from gradients summed in another order, per
 * tensor: ||got - want|| / sqrt(numel) <= 1e-3 * lr * steps, as tests/helpers/tolerances.py's
 * assert_trained_weights_close (AdamW turns a gradient's relative error into the same relative
 * error of a step of about lr, large where the gradient is within rounding noise of zero; which
 * elements those are depends on the CPU's summation order, so no elementwise bound holds). */
static int trained_weights_close(const Dataflow_Blocked_Model *bm, const Dataflow_Block_Memory *got,
				 const Dataflow_Block_Memory *want, double lr, int steps)
{
	int ok = 1;
	for (int i = 0; i < dataflow_blocked_model_num_tensors(bm); i++) {
		Dataflow_Llama_Tensor t;
		CHECK(dataflow_blocked_model_tensor(bm, i, &t));
		float *g = to_host((const float *)got[t.block].param + t.offset, t.numel * 4);
		float *w = to_host((const float *)want[t.block].param + t.offset, t.numel * 4);
		double sum = 0;
		for (int64_t j = 0; j < t.numel; j++)
			sum += ((double)g[j] - w[j]) * ((double)g[j] - w[j]);
		free(g), free(w);
		double rms = sqrt(sum / (double)t.numel), bound = 1e-3 * lr * steps;
		if (!(rms <= bound)) {
			fprintf(stderr, "chunks: %s differs by %g RMS after %d steps (bound %g)\n", t.name, rms, steps, bound);
			ok = 0;
		}
	}
	return ok;
}

static uint64_t grad_bytes(const Dataflow_Blocked_Model *bm, int block)
{
	Dataflow_Block_Sizes sizes;
	CHECK(dataflow_blocked_model_block_sizes(bm, block, &sizes));
	return (uint64_t)sizes.bytes[DATAFLOW_BLOCK_GRAD];
}

static int chunked(const Dataflow_Llama_Config *config)
{
	enum { STEPS = 3 };
	Dataflow_Llama *whole_model, *chunked_model;
	CHECK(dataflow_llama_create(h, config, &whole_model));
	CHECK(dataflow_llama_create(h, config, &chunked_model));
	init_weights(whole_model, 777u);
	init_weights(chunked_model, 777u);
	Dataflow_Llama_Batch batches[CHUNKS];
	int32_t *whole = NULL;
	void *chunk_buffers[CHUNKS];
	upload_document(config->vocab_size, &whole, batches, chunk_buffers);
	/* the training engine on the whole document, and its AdamW over the chunk-driven gradients */
	Dataflow_Ring_Executor *whole_engine = resident_executor(h, whole_model, DOC, DOC, DATAFLOW_SAVE_ALL);
	Dataflow_Ring_Executor *chunked_engine = resident_executor(h, chunked_model, DOC, DOC, DATAFLOW_SAVE_ALL);
	const Dataflow_Blocked_Model *bm = dataflow_llama_blocked_model(chunked_model);
	int nb = dataflow_blocked_model_num_blocks(bm);
	Dataflow_Block_Memory *mem = calloc((size_t)nb, sizeof(*mem)), *want = calloc((size_t)nb, sizeof(*want));
	Context x = alloc_context(config);
	Dataflow_AdamW_Params adamw = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
	float loss_scale = 1.0f / 140; /* labelled tokens: 149 minus every 17th from 5 */
	float *doc_losses = malloc(DOC * 4);
	int ok = 1;
	for (int step = 1; step <= STEPS; step++) {
		Dataflow_Save_Level level = (Dataflow_Save_Level)(step - 1);
		Acts acts[CHUNKS];
		for (int c = 0; c < CHUNKS; c++)
			acts[c] = alloc_acts(bm, level, chunk_len[c]);
		const float *want_losses = resident_loss_backward(whole_engine, whole, DOC, 1, loss_scale);
		for (int b = 0; b < nb; b++) {
			CHECK(dataflow_llama_block(chunked_model, b, &mem[b]));
			CHECK(dataflow_llama_block(whole_model, b, &want[b]));
			CHECK(dataflow_set_mem(h, 0, mem[b].grad, 0, grad_bytes(bm, b)));
		}
		drive_chunks(bm, batches, level, acts, mem, &x, loss_scale);
		for (int c = 0; c < CHUNKS; c++) {
			float *losses = to_host(acts[c].token_losses, chunk_len[c] * 4);
			memcpy(doc_losses + x.past[c], losses, (size_t)chunk_len[c] * 4);
			free(losses);
		}
		float got_loss = dataflow_batch_loss(doc_losses, DOC, loss_scale);
		float want_loss = dataflow_batch_loss(want_losses, DOC, loss_scale);
		if (fabsf(got_loss - want_loss) > 1e-5f * fabsf(want_loss)) {
			fprintf(stderr, "chunks, step %d: loss %.8f, whole document %.8f\n", step, got_loss, want_loss);
			ok = 0;
		}
		ok &= grads_close(bm, step, mem, want);
		CHECK(dataflow_ring_executor_apply(whole_engine, &adamw, 1.0, step));
		CHECK(dataflow_ring_executor_apply(chunked_engine, &adamw, 1.0, step));
		for (int c = 0; c < CHUNKS; c++)
			free_acts(bm, &acts[c]);
		if (step == STEPS)
			printf("c_llama_block chunks: %s (%d chunks of a %d-token document, %d steps, loss %.6f)\n",
			       ok ? "ok" : "MISMATCH", CHUNKS, DOC, STEPS, want_loss);
	}
	ok &= trained_weights_close(bm, mem, want, adamw.lr, STEPS);
	free_context(&x, (int)config->num_layers);
	for (int c = 0; c < CHUNKS; c++)
		dataflow_free_mem(h, chunk_buffers[c]);
	free(whole);
	dataflow_ring_executor_destroy(whole_engine);
	dataflow_ring_executor_destroy(chunked_engine);
	free(mem), free(want), free(doc_losses);
	dataflow_llama_destroy(whole_model);
	dataflow_llama_destroy(chunked_model);
	return ok;
}

/* A call without what it needs fails with a message naming it, and submits nothing. */
static int bad_arguments(void)
{
	Dataflow_Llama_Config c = {.vocab_size = 19, .hidden_size = 16, .intermediate_size = 24, .num_layers = 1,
				   .num_heads = 2, .num_kv_heads = 1, .rms_eps = 1e-5f, .rope = {.theta = 10000.0f},
				   .dtype = DATAFLOW_FP32};
	Dataflow_Blocked_Model *bm;
	CHECK(dataflow_llama_blocked_model_create(h, &c, &bm));
	Dataflow_Llama_Batch batch = {.num_tokens = 4, .num_docs = 1};
	Dataflow_Block_Memory mem = {0};
	Dataflow_Block_Args a = {.batch = &batch};
	int ok = dataflow_block_forward(bm, 1, 0, &mem, &a) == DATAFLOW_ERR_INVALID_ARGUMENT &&
		 strstr(dataflow_last_error(), "memory->param");
	ok &= dataflow_block_forward(bm, 3, 0, &mem, &a) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "block must be in [0, 3)");
	int64_t saved = 0;
	ok &= dataflow_block_acts_bytes(bm, 1, DATAFLOW_NUM_SAVE_LEVELS, 4, &saved, NULL, NULL) ==
		      DATAFLOW_ERR_INVALID_ARGUMENT &&
	      saved == -1;
	/* a layer's backward over a K/V context without the context's gradients, or over a
	 * two-document chunk: refused before anything is read (any non-NULL pointer will do) */
	static int32_t dummy[8];
	Dataflow_Llama_Batch chunk = {.num_tokens = 4, .num_docs = 1, .tokens = dummy, .cu_seqlens = dummy,
				      .positions = dummy};
	Dataflow_Block_Memory mem1 = {.param = dummy, .grad = (float *)dummy};
	Dataflow_Block_KV kv = {.k = dummy, .v = dummy, .past = 4, .cu_k = dummy};
	Dataflow_Block_Args b = {.batch = &chunk, .x = dummy, .saved = dummy, .recomputed = dummy, .dy = dummy,
				 .dx = dummy, .dacts = dummy, .workspace = dummy, .kv = &kv};
	ok &= dataflow_block_backward_x(bm, 1, 0, &mem1, &b) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "kv->dk and kv->dv");
	kv.dk = kv.dv = (float *)dummy;
	chunk.num_docs = 2;
	ok &= dataflow_block_backward_x(bm, 1, 0, &mem1, &b) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "one-document chunk");
	dataflow_blocked_model_destroy(bm);
	/* a mixture of experts trained with the load-balancing loss: backward_x needs the pass's
	 * router statistics, and a pass of at least the chunk's tokens */
	c.num_experts = 3;
	c.num_experts_per_tok = 2;
	c.moe_intermediate_size = 8;
	c.router_aux_loss_coef = 0.01f;
	CHECK(dataflow_llama_blocked_model_create(h, &c, &bm));
	chunk.num_docs = 1;
	b.kv = NULL;
	ok &= dataflow_block_backward_x(bm, 1, 0, &mem1, &b) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "args->router (router_aux_loss_coef > 0");
	Dataflow_Block_Router_Loss router = {.tokens = 4, .d_loss = 0.01f};
	b.router = &router;
	ok &= dataflow_block_backward_x(bm, 1, 0, &mem1, &b) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "args->router->stats");
	router.stats = (float *)dummy;
	router.tokens = 3;
	b.y = dummy;
	ok &= dataflow_block_forward(bm, 1, 0, &mem1, &b) == DATAFLOW_ERR_INVALID_ARGUMENT &&
	      strstr(dataflow_last_error(), "must be >= the chunk's 4, got 3");
	dataflow_blocked_model_destroy(bm);
	if (!ok)
		fprintf(stderr, "bad arguments: accepted or unclear: %s\n", dataflow_last_error());
	return ok;
}

int main(void)
{
	Dataflow_Handle_Config hc = {.num_streams = 1, .device_memory_bytes = 256u << 20};
	CHECK(dataflow_handle_create("host", &hc, &h));
	CHECK(dataflow_register_default_ops(h));
	Dataflow_Llama_Config untied = {.vocab_size = 41, .hidden_size = 24, .intermediate_size = 40, .num_layers = 3,
					.num_heads = 4, .num_kv_heads = 2, .head_dim = 8, .rms_eps = 1e-5f,
					.rope = {.theta = 10000.0f}, .dtype = DATAFLOW_FP32};
	Dataflow_Llama_Config tied = untied;
	tied.tie_embeddings = 1;
	tied.num_kv_heads = 4;
	tied.dtype = DATAFLOW_BF16;
	int ok = run(&untied, "untied fp32") & run(&tied, "tied bf16") & chunked(&untied) & bad_arguments();
	dataflow_handle_destroy(h);
	return ok ? 0 : 1;
}
