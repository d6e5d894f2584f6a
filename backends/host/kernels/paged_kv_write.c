/* paged_kv_write: k_pages[slot_mapping[t]][h] = k[t][h], v_pages likewise, one row of head_dim
 * elements per (token, kv head); a slot outside the pool is skipped. A copy, so no ISA paths. */
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"

typedef Dataflow_Paged_Kv_Write_Args Args;

static void paged_kv_write(const Args *x, int part, int num_parts, size_t es)
{
	const size_t row = (size_t)(x->num_kv_heads * x->head_dim) * es;
	const int64_t num_slots = x->num_pages * x->page_size;
	int64_t begin, end;
	dataflow_part_range(x->num_tokens, part, num_parts, 1, &begin, &end);
	for (int64_t t = begin; t < end; t++) {
		int32_t slot = x->slot_mapping[t];
		if (slot < 0 || slot >= num_slots)
			continue;
		memcpy((char *)x->k_pages + (size_t)slot * row, (const char *)x->k + (size_t)t * row, row);
		memcpy((char *)x->v_pages + (size_t)slot * row, (const char *)x->v + (size_t)t * row, row);
	}
}

#define PAGED_KV_WRITE(DT, SIZE)                                                           \
	void dataflow_host_paged_kv_write_##DT(void **args, int part, int num_parts)       \
	{                                                                                  \
		Args x = dataflow_paged_kv_write_args(args);                               \
		paged_kv_write(&x, part, num_parts, SIZE);                                 \
	}

PAGED_KV_WRITE(fp32, 4)
PAGED_KV_WRITE(fp16, 2)
PAGED_KV_WRITE(bf16, 2)

/* parts of at least 64 tokens: a row is small */
DATAFLOW_HOST_LAUNCH(dataflow_host_paged_kv_write_launch, Args, dataflow_paged_kv_write_args,
		     dataflow_elementwise_parts(a.num_tokens, 64))
