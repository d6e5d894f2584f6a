/* C-level check of libdataflowmodels through its public API: a tiny Llama with zero weights
 * (norms zero too, so every logit is exactly 0) has loss log(vocab) per labelled token, the
 * chunk loss reports loss_scale * that sum, the tensor table names HF tensors inside their
 * blocks (a Qwen3 config's biases and per-head norms too), a bad config fails with a message,
 * and the ring executor adopting the model's blocks gives the same token losses and runs an
 * AdamW step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_test.h"
#include "resident_training.h"
#include "tiny_llama.h"
#include "dataflow/models.h"
#include "dataflow/ops.h"

static void *upload(Dataflow_Handle *h, const int32_t *values, int n)
{
	void *p;
	CHECK(dataflow_alloc_mem(h, (uint64_t)n * 4, &p));
	CHECK(dataflow_submit_inbound_transfer(h, 0, p, values, (uint64_t)n * 4));
	CHECK(dataflow_sync_stream(h, 0));
	return p;
}

int main(void)
{
	Dataflow_Handle *h = open_host(1, 256u << 20, NULL);
	CHECK(dataflow_register_default_ops(h));

	Dataflow_Llama_Config c = tiny_llama_config();
	Dataflow_Llama *bad;
	c.num_kv_heads = 3;
	if (dataflow_llama_create(h, &c, &bad) != DATAFLOW_ERR_INVALID_ARGUMENT || !strstr(dataflow_last_error(), "num_kv_heads")) {
		fprintf(stderr, "bad config accepted or unclear: %s\n", dataflow_last_error());
		return 1;
	}
	c.num_kv_heads = 2;
	Dataflow_Llama *m;
	CHECK(dataflow_llama_create(h, &c, &m));
	if (dataflow_llama_num_tensors(m) != 9 * 2 + 3 || dataflow_llama_num_blocks(m) != 4) {
		fprintf(stderr, "unexpected tensor/block count\n");
		return 1;
	}
	Dataflow_Llama_Tensor t;
	CHECK(dataflow_llama_tensor(m, 1 + 9 + 6, DATAFLOW_BLOCK_PARAM, &t));
	if (strcmp(t.name, "model.layers.1.mlp.down_proj.weight") || t.shape[0] != 24 || t.shape[1] != 40 || t.block != 2) {
		fprintf(stderr, "tensor table: got %s [%lld, %lld] block %d\n", t.name, (long long)t.shape[0],
			(long long)t.shape[1], t.block);
		return 1;
	}

	/* a Qwen3 with attention_bias: q/k/v/o biases and per-head norms join each layer, in HF order */
	Dataflow_Llama_Config qc = c;
	qc.head_dim = 10;
	qc.qkv_bias = qc.o_bias = qc.qk_norm = 1;
	Dataflow_Blocked_Model *q;
	CHECK(dataflow_llama_blocked_model_create(h, &qc, &q));
	const char *layer0[] = {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight",
				"v_proj.bias",   "o_proj.weight", "o_proj.bias", "q_norm.weight", "k_norm.weight"};
	const int64_t numel0[] = {40 * 24, 40, 20 * 24, 20, 20 * 24, 20, 24 * 40, 24, 10, 10};
	if (dataflow_blocked_model_num_tensors(q) != 15 * 2 + 3) {
		fprintf(stderr, "qwen tensor count %d\n", dataflow_blocked_model_num_tensors(q));
		return 1;
	}
	for (int i = 0; i < 10; i++) {
		char name[DATAFLOW_LLAMA_NAME_MAX];
		snprintf(name, sizeof(name), "model.layers.0.self_attn.%s", layer0[i]);
		CHECK(dataflow_blocked_model_tensor(q, 1 + i, &t));
		if (strcmp(t.name, name) || t.numel != numel0[i] || t.block != 1 || t.offset % DATAFLOW_LLAMA_ALIGN) {
			fprintf(stderr, "qwen tensor %d: got %s (%lld elements, block %d, offset %lld), expected %s (%lld)\n",
				1 + i, t.name, (long long)t.numel, t.block, (long long)t.offset, name, (long long)numel0[i]);
			return 1;
		}
	}
	dataflow_blocked_model_destroy(q);

	/* two documents of 5 and 3 tokens, labels aligned (the last token of each unlabelled), as one
	 * packed host buffer: tokens, positions, labels, cu_seqlens */
	int32_t packed[8 * 3 + 3] = {1, 5, 9, 2, 36, 7, 0, 3, /* tokens */
				     0, 1, 2, 3, 4, 0, 1, 2,  /* positions */
				     5, 9, 2, 36, -100, 0, 3, -100, /* labels */
				     0, 5, 8};
	if (dataflow_batch_buffer_numel(8, 2, 1) != 8 * 3 + 3) {
		fprintf(stderr, "batch buffer layout changed\n");
		return 1;
	}
	/* the model's own loss: one transfer of the token losses, one sync */
	int32_t *device_batch = upload(h, packed, 8 * 3 + 3);
	Dataflow_Llama_Batch b;
	CHECK(dataflow_batch_from_buffer(device_batch, 8, 2, 1, &b));
	CHECK(dataflow_llama_loss(m, 0, &b));
	Dataflow_Llama_Outputs out;
	CHECK(dataflow_llama_outputs(m, &out));
	float token_losses[8];
	CHECK(dataflow_submit_outbound_transfer(h, 0, token_losses, out.token_losses, sizeof(token_losses)));
	CHECK(dataflow_sync_stream(h, 0));
	float loss = dataflow_batch_loss(token_losses, out.num_tokens, 1.0f / 6);
	if (out.num_tokens != 8 || fabs(loss - log(37.0)) > 1e-5) {
		fprintf(stderr, "zero-weight loss %.7f over %lld tokens, expected log(37) = %.7f\n", loss,
			(long long)out.num_tokens, log(37.0));
		return 1;
	}
	/* training is the executor's, over the model's own blocks: the same losses, an AdamW step */
	Dataflow_Ring_Executor *x = resident_executor(h, m, 8, 8, DATAFLOW_SAVE_ALL);
	const float *trained = resident_loss_backward(x, packed, 8, 2, 1.0f / 6);
	if (memcmp(trained, token_losses, sizeof(token_losses))) {
		fprintf(stderr, "the executor's token losses differ from the model's loss\n");
		return 1;
	}
	Dataflow_AdamW_Params adamw = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0};
	CHECK(dataflow_ring_executor_apply(x, &adamw, 1.0, 1));
	CHECK(dataflow_ring_executor_wait(x));
	Dataflow_Ring_Outputs ring_out;
	CHECK(dataflow_ring_executor_outputs(x, &ring_out));
	float norm = ring_out.grad_norm[0];
	dataflow_ring_executor_destroy(x);
	Dataflow_Block_Memory block;
	CHECK(dataflow_llama_block(m, 1, &block));
	if (!block.m || !block.v || block.master || !(norm >= 0)) {
		fprintf(stderr, "adamw: m, v not allocated (or master without asking) or norm %g\n", norm);
		return 1;
	}
	CHECK(dataflow_free_mem(h, device_batch));
	dataflow_llama_destroy(m);
	dataflow_handle_destroy(h);
	printf("c_llama: ok (loss %.6f, grad norm %.3g)\n", loss, norm);
	return 0;
}
