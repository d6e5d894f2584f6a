#ifndef DATAFLOW_RESIDENT_TRAINING_H
#define DATAFLOW_RESIDENT_TRAINING_H

/* The C tests' all-resident training through the one training engine: a ring executor of the
 * all-resident plan (libdataflowring) adopting a resident Llama's own blocks in place, every
 * role on stream 0, fed chunks from host packed batches (dataflow_batch_buffer_numel layout). */

#include <stdlib.h>

#include "c_test.h"
#include "dataflow/device_profile.h"
#include "dataflow/models.h"
#include "dataflow/ring_executor.h"
#include "dataflow/ring_model.h"

/* An executor training `m` (its AdamW m and v allocated first) on chunks of up to `tokens`
 * tokens in documents of at most seq_len (tokens a multiple of it), at save level `level`. */
static inline Dataflow_Ring_Executor *resident_executor(Dataflow_Handle *h, Dataflow_Llama *m, int64_t seq_len,
							int64_t tokens, Dataflow_Save_Level level)
{
	const Dataflow_Blocked_Model *bm = dataflow_llama_blocked_model(m);
	int nb = dataflow_llama_num_blocks(m);
	Dataflow_Ring_Block *ring_blocks = calloc((size_t)nb, sizeof(*ring_blocks));
	Dataflow_Block_Memory *memory = calloc((size_t)nb, sizeof(*memory));
	Dataflow_Ring_Plan *plan = malloc(sizeof(*plan));
	Dataflow_Ring_Model ring_model;
	Dataflow_Device_Profile profile;
	CHECK(dataflow_ring_model_from_blocked(bm, ring_blocks, nb, &ring_model));
	CHECK(dataflow_device_profile_named("h100-sxm", &profile));
	Dataflow_Ring_Request request = {.model = &ring_model, .seq_len = seq_len, .tokens_per_step = tokens,
					 .device_bytes = 1u << 30, .host_bytes = 1u << 30,
					 .profile = &profile};
	CHECK(dataflow_ring_plan_resident(&request, level, plan));
	CHECK(dataflow_llama_alloc_optimizer_state(m, 0));
	for (int b = 0; b < nb; b++)
		CHECK(dataflow_llama_block(m, b, &memory[b]));
	Dataflow_Ring_Streams streams = {0, 0, 0, 0};
	Dataflow_Ring_Executor *x;
	CHECK(dataflow_ring_executor_adopt(h, bm, plan, &streams, memory, &x));
	free(ring_blocks), free(memory), free(plan);
	return x;
}

/* Forward, loss and backward of one chunk (host packed batch with labels): the gradients of
 * loss_scale * the summed token losses written over the model's. Returns the token losses
 * (host, valid until the executor's next call). */
static inline const float *resident_loss_backward(Dataflow_Ring_Executor *x, const int32_t *buffer,
						  int64_t num_tokens, int64_t num_docs, float loss_scale)
{
	Dataflow_Ring_Chunk chunk = {.buffer = buffer, .num_tokens = num_tokens, .num_docs = num_docs};
	CHECK(dataflow_ring_executor_accumulate(x, &chunk, 1, 0, loss_scale));
	CHECK(dataflow_ring_executor_wait(x));
	Dataflow_Ring_Outputs out;
	CHECK(dataflow_ring_executor_outputs(x, &out));
	return out.token_losses;
}

#endif
