/* adamw_step: AdamW with fp32 m and v (the update: adamw_update.h). */
#include "adamw_update.h"
#include "dataflow/op_args.h"

/* parts are whole cache lines of m and v and at least 16 Ki elements (~200 KiB of traffic) */
#define PART_ALIGN 64
#define PART_MIN 16384

#define ADAMW_VARIANT(name, pt, gt)                                                                  \
	ADAMW_FP32_STATE_PATHS(name, pt, gt)                                                         \
	void dataflow_host_##name(void **args, int part, int num_parts)                              \
	{                                                                                            \
		ADAMW_PART_BEGIN(Dataflow_Adamw_Step_Args, dataflow_adamw_step_args, PART_ALIGN);    \
		ADAMW_FP32_STATE_RUN(name, &a, adamw_at(x.param, i, pt), adamw_at(x.grad, i, gt),         \
				     x.master ? x.master + i : NULL, x.m + i, x.v + i, end - i);             \
	}

ADAMW_EACH_VARIANT(ADAMW_VARIANT, adamw_step)

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_adamw_step_launch, Dataflow_Adamw_Step_Args, dataflow_adamw_step_args,
				 PART_MIN)
