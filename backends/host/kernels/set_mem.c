/* set_mem: x[i] = value rounded (RNE) to x's dtype, for i < n. */
#include <string.h>

#include "dataflow/host_kernel.h"

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

static void set_mem_part(const void *element, size_t size, void **args, int part, int num_parts)
{
	int64_t n = DATAFLOW_ARG(args, 0, int64_t);
	char *x = DATAFLOW_ARG(args, 2, char *);
	int64_t begin, end;
	dataflow_part_range(n, part, num_parts, PART_ALIGN, &begin, &end);
	fill(x + begin * (int64_t)size, element, size, end - begin);
}

void dataflow_host_set_mem_fp32(void **args, int part, int num_parts)
{
	float value = DATAFLOW_ARG(args, 1, float);
	set_mem_part(&value, sizeof(value), args, part, num_parts);
}

void dataflow_host_set_mem_fp16(void **args, int part, int num_parts)
{
	uint16_t value = dataflow_fp32_to_fp16(DATAFLOW_ARG(args, 1, float));
	set_mem_part(&value, sizeof(value), args, part, num_parts);
}

void dataflow_host_set_mem_bf16(void **args, int part, int num_parts)
{
	uint16_t value = dataflow_fp32_to_bf16(DATAFLOW_ARG(args, 1, float));
	set_mem_part(&value, sizeof(value), args, part, num_parts);
}

/* Args: n, value, x. Shapes were validated by libdataflowops. */
Dataflow_Status dataflow_host_set_mem_launch(Dataflow_Handle *handle, const Op *op, void *op_state,
					     Dataflow_Launch_Config *config)
{
	(void)handle;
	(void)op_state;
	if (dataflow_op_require_tensors(op, 0) != DATAFLOW_OK)
		return dataflow_last_status();
	int64_t n = *(const int64_t *)op->op_args[0];
	if (n < 0)
		return dataflow_set_error(DATAFLOW_ERR_INVALID_ARGUMENT, "set_mem: n: expected >= 0, got %lld",
					  (long long)n);
	int64_t size = (int64_t)dataflow_datatype_size(op->skeleton.arg_dtypes[2]);
	config->num_parts = dataflow_elementwise_parts(n, PART_MIN_BYTES / size);
	return DATAFLOW_OK;
}
