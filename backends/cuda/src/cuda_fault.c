#include <stdio.h>

#include "cuda_fault.h"

void cuda_op_log_push(Cuda_Op_Log *log, const char *name)
{
	snprintf(log->names[log->count % CUDA_OP_LOG_NAMES], CUDA_OP_NAME_MAX, "%s", name);
	log->count++;
}

void cuda_op_log_clear(Cuda_Op_Log *log)
{
	log->count = 0;
}

void cuda_op_log_describe(const Cuda_Op_Log *log, char *buf, size_t size)
{
	if (log->count == 0) {
		snprintf(buf, size, "no op submitted since the last sync (a transfer or host op)");
		return;
	}
	if (log->count == 1) {
		snprintf(buf, size, "op '%s'", log->names[0]);
		return;
	}
	uint64_t shown = log->count < CUDA_OP_LOG_NAMES ? log->count : CUDA_OP_LOG_NAMES;
	size_t n = (size_t)snprintf(buf, size, "one of the %llu ops submitted since the last sync (",
				    (unsigned long long)log->count);
	if (shown < log->count && n < size)
		n += (size_t)snprintf(buf + n, size - n, "the last %llu: ", (unsigned long long)shown);
	for (uint64_t i = log->count - shown; i < log->count && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s'%s'", i > log->count - shown ? ", " : "",
				      log->names[i % CUDA_OP_LOG_NAMES]);
	if (n < size)
		snprintf(buf + n, size - n, ")");
}

int cuda_error_is_sticky(CUresult result)
{
	switch (result) {
	case CUDA_ERROR_CONTAINED:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK:
		return 1;
	default:
		return 0;
	}
}
