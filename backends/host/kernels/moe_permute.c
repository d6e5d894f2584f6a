/* moe_permute_index: the routed slot_of of topk_ids, ordered by expert, then token, then j:
 *   expert_offsets = exclusive prefix sums of the per-expert counts (valid ids only)
 *   slot_of[t, j] = expert_offsets[id] + (assignments to id before (t, j)),  -1 for a bad id
 *   row_map[slot_of[t, j]] = t,  -1 past expert_offsets[experts]
 * Two passes over tokens * top_k ids: too little work to split, so one part (moe_permute's
 * gather, the embedding op, is the parallel half). */
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"

void dataflow_host_moe_permute_index_int32(void **args, int part, int num_parts)
{
	(void)part, (void)num_parts;
	Dataflow_Moe_Permute_Index_Args a = dataflow_moe_permute_index_args(args);
	const int32_t *ids = a.topk_ids; /* the id_dtype slot: int32 */
	int64_t n = a.tokens * a.top_k;
	int32_t *next = a.expert_offsets; /* counts, then offsets, then each expert's next slot */
	memset(next, 0, (size_t)(a.experts + 1) * sizeof(int32_t));
	for (int64_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < a.experts)
			next[ids[i] + 1]++;
	for (int64_t e = 0; e < a.experts; e++)
		next[e + 1] += next[e];
	for (int64_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		int32_t s = id >= 0 && id < a.experts ? next[id]++ : -1;
		a.slot_of[i] = s;
		if (s >= 0)
			a.row_map[s] = (int32_t)(i / a.top_k);
	}
	/* next[e] is now offsets[e + 1]: shift back */
	memmove(next + 1, next, (size_t)a.experts * sizeof(int32_t));
	next[0] = 0;
	for (int64_t s = next[a.experts]; s < n; s++)
		a.row_map[s] = -1;
}

DATAFLOW_HOST_ONE_PART_LAUNCH(dataflow_host_moe_permute_index_launch)
