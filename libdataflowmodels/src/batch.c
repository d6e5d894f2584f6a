/* Packed batches in one int32 buffer, and the loss of a batch from its token losses. */
#include "blocked_internal.h"

int64_t dataflow_batch_buffer_numel(int64_t num_tokens, int64_t num_docs, int with_labels)
{
	if (num_tokens <= 0 || num_tokens > ((int64_t)1 << 31) || num_docs <= 0 || num_docs > num_tokens)
		return -1;
	return (with_labels ? 3 : 2) * num_tokens + num_docs + 1;
}

Dataflow_Status dataflow_batch_from_buffer(const int32_t *buffer, int64_t num_tokens, int64_t num_docs,
					   int with_labels, Dataflow_Llama_Batch *batch)
{
	if (!buffer || !batch)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "batch from buffer: buffer and batch are required");
	if (dataflow_batch_buffer_numel(num_tokens, num_docs, with_labels) < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT,
					  "batch from buffer: need 1 <= num_docs <= num_tokens <= 2^31, got %lld "
					  "documents, %lld tokens",
					  (long long)num_docs, (long long)num_tokens);
	batch->num_tokens = num_tokens;
	batch->num_docs = num_docs;
	batch->tokens = buffer;
	batch->positions = buffer + num_tokens;
	batch->labels = with_labels ? buffer + 2 * num_tokens : NULL;
	batch->cu_seqlens = buffer + (with_labels ? 3 : 2) * num_tokens;
	return DATAFLOW_OK;
}

float dataflow_batch_loss(const float *token_losses, int64_t n, float loss_scale)
{
	double sum = 0;
	for (int64_t t = 0; t < n; t++)
		sum += token_losses[t];
	return (float)(sum * loss_scale);
}
