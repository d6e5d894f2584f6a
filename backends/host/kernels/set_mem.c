/* set_mem: x[i] = value rounded (RNE) to x's dtype, for i < n. */
#include <string.h>

#include "dataflow/host_kernel.h"
#include "dataflow/op_args.h"

/* parts are multiples of 64 elements and at least 32 KiB of output */
#define PART_ALIGN 64
#define PART_MIN_BYTES 32768

/* Copies a 256-byte block of the element pattern over the range: a constant-size memcpy
 * compiles to wide stores, so this runs at store bandwidth without a vector path. */
static void fill(char *x, const void *element, size_t size, int64_t count)
{
	unsigned char block[256];
	for (size_t i = 0; i < sizeof(block); i += size)
		memcpy(block + i, element, size);
	size_t bytes = (size_t)count * size;
	for (; bytes >= sizeof(block); x += sizeof(block), bytes -= sizeof(block))
		memcpy(x, block, sizeof(block));
	memcpy(x, block, bytes);
}

static void set_mem_part(const void *element, size_t size, const Dataflow_Set_Mem_Args *a, int part, int num_parts)
{
	int64_t begin, end;
	dataflow_part_range(a->n, part, num_parts, PART_ALIGN, &begin, &end);
	fill((char *)a->x + begin * (int64_t)size, element, size, end - begin);
}

void dataflow_host_set_mem_fp32(void **args, int part, int num_parts)
{
	Dataflow_Set_Mem_Args a = dataflow_set_mem_args(args);
	set_mem_part(&a.value, sizeof(a.value), &a, part, num_parts);
}

void dataflow_host_set_mem_fp16(void **args, int part, int num_parts)
{
	Dataflow_Set_Mem_Args a = dataflow_set_mem_args(args);
	uint16_t value = dataflow_fp32_to_fp16(a.value);
	set_mem_part(&value, sizeof(value), &a, part, num_parts);
}

void dataflow_host_set_mem_bf16(void **args, int part, int num_parts)
{
	Dataflow_Set_Mem_Args a = dataflow_set_mem_args(args);
	uint16_t value = dataflow_fp32_to_bf16(a.value);
	set_mem_part(&value, sizeof(value), &a, part, num_parts);
}

DATAFLOW_HOST_ELEMENTWISE_LAUNCH(dataflow_host_set_mem_launch, Dataflow_Set_Mem_Args, dataflow_set_mem_args,
				 PART_MIN_BYTES / (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[DATAFLOW_SET_MEM_ARG_X]))
