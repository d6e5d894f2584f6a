#ifndef DATAFLOW_CUDA_FAULT_H
#define DATAFLOW_CUDA_FAULT_H

/* Device faults. A kernel that faults (illegal address, trap, ...) is reported by the driver
 * only later, by whatever call next waits on its stream (the next sync), and the sync cannot
 * say which launch it was. Each stream therefore keeps the names of the ops submitted to it
 * since its last successful sync, and the sync's error names them. Pure functions: no driver,
 * unit-tested on the host (tests/c/test_cuda_fault.c). */

#include <stddef.h>
#include <stdint.h>

#include "cuda_driver.h"

#define CUDA_OP_LOG_NAMES 8 /* the last ops a fault message names */
#define CUDA_OP_NAME_MAX 48

typedef struct {
	uint64_t count; /* ops submitted since the last successful sync */
	char names[CUDA_OP_LOG_NAMES][CUDA_OP_NAME_MAX]; /* op i in names[i % CUDA_OP_LOG_NAMES] */
} Cuda_Op_Log;

void cuda_op_log_push(Cuda_Op_Log *log, const char *name);
void cuda_op_log_clear(Cuda_Op_Log *log);
/* Where a fault found at a sync comes from, e.g. "op 'attention'", "one of the 3 ops submitted
 * since the last sync ('rms_norm', 'matmul', 'attention')", "one of the 20 ops ... (the last
 * 8: ...)", or "no op submitted since the last sync (a transfer or host op)". */
void cuda_op_log_describe(const Cuda_Op_Log *log, char *buf, size_t size);
/* 1 for the errors after which the context is lost: every later call in this process on that
 * device returns the same error (cuda.h: "the process must be terminated and relaunched"). */
int cuda_error_is_sticky(CUresult result);

#endif
