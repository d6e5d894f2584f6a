/* How AdamW's m and v and the host's gradients are stored, and what that costs (ring_plan.h). */
#include "dataflow/default_ops.h"
#include "dataflow/ring_plan.h"

int64_t dataflow_optimizer_state_bytes(Dataflow_Optimizer_State state, int64_t numel)
{
	if (numel < 0)
		return -1;
	switch (state) {
	case DATAFLOW_OPTIMIZER_STATE_FP32:
		return 4 * numel;
	case DATAFLOW_OPTIMIZER_STATE_BF16:
		return 2 * numel;
	case DATAFLOW_OPTIMIZER_STATE_8BIT:
		return (numel + 63) / 64 * 64 + 4 * ((numel + DATAFLOW_ADAMW_8BIT_BLOCK - 1) / DATAFLOW_ADAMW_8BIT_BLOCK);
	default:
		return -1;
	}
}

int64_t dataflow_shard_numel(int64_t numel, int ranks)
{
	return ranks > 1 ? numel / ranks + numel % ranks : numel;
}

const char *dataflow_optimizer_state_name(Dataflow_Optimizer_State state)
{
	static const char *names[DATAFLOW_NUM_OPTIMIZER_STATES] = {"fp32", "bf16", "8bit"};
	return (int)state >= 0 && state < DATAFLOW_NUM_OPTIMIZER_STATES ? names[state] : NULL;
}

const char *dataflow_host_gradients_name(Dataflow_Host_Gradients host_gradients)
{
	static const char *names[DATAFLOW_NUM_HOST_GRADIENTS] = {"fp32", "bf16"};
	return (int)host_gradients >= 0 && host_gradients < DATAFLOW_NUM_HOST_GRADIENTS ? names[host_gradients] : NULL;
}
