/* moe_permute: the slots of each routed token (moe_permute_index), then the rows gathered by
 * the embedding op with the row map as ids (ops.h). */
#include "op_catalogue_internal.h"
#include "dataflow/op_args.h"

Dataflow_Status dataflow_submit_moe_permute(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					    int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden,
					    const int32_t *topk_ids, const void *x, int32_t *expert_offsets,
					    int32_t *row_map, int32_t *slot_of, void *x_perm)
{
	Dataflow_Moe_Permute_Index_Args p = {.tokens = tokens, .experts = experts, .top_k = top_k, .topk_ids = topk_ids,
					     .expert_offsets = expert_offsets, .row_map = row_map, .slot_of = slot_of};
	Dataflow_Embedding_Args g = {.num_tokens = tokens * top_k, .hidden = hidden, .vocab = tokens, .ids = row_map,
				     .table = x, .out = x_perm};
	DataflowDatatype index_slots[] = {DATAFLOW_INT32}, gather_slots[] = {DATAFLOW_INT32, dtype};
	void *p_args[DATAFLOW_MAX_OP_ARGS], *g_args[DATAFLOW_MAX_OP_ARGS];
	dataflow_moe_permute_index_arg_pointers(&p, p_args);
	dataflow_embedding_arg_pointers(&g, g_args);
	return ops_submit_composite(handle, stream_id, DATAFLOW_OP_MOE_PERMUTE_INDEX, index_slots, p_args,
				    DATAFLOW_OP_EMBEDDING, gather_slots, g_args);
}
