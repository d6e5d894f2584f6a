/* What a device fault's error names (backends/cuda/src/cuda_fault.c), on the host: the ops a
 * stream ran since its last successful sync, and which CUresults lose the context. */
#include <stdio.h>
#include <string.h>

#include "c_test.h"
#include "cuda_fault.h"

static void test_describe(void)
{
	Cuda_Op_Log log = {0};
	char buf[640];
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_STR(buf, "no op submitted since the last sync (a transfer or host op)");
	cuda_op_log_push(&log, "attention");
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_STR(buf, "op 'attention'");
	cuda_op_log_push(&log, "rms_norm");
	cuda_op_log_push(&log, "matmul");
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_STR(buf, "one of the 3 ops submitted since the last sync ('attention', 'rms_norm', 'matmul')");

	/* past the ring: the last CUDA_OP_LOG_NAMES, oldest first */
	cuda_op_log_clear(&log);
	char name[16];
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "op%d", i);
		cuda_op_log_push(&log, name);
	}
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_STR(buf, "one of the 20 ops submitted since the last sync (the last 8: 'op12', 'op13', 'op14', 'op15', "
		       "'op16', 'op17', 'op18', 'op19')");

	/* after a clear the next op is alone again */
	cuda_op_log_clear(&log);
	cuda_op_log_push(&log, "add");
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_STR(buf, "op 'add'");

	/* a long name is cut to the slot, a small buffer cuts the text, never overruns */
	char longname[100];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	cuda_op_log_push(&log, longname);
	cuda_op_log_describe(&log, buf, sizeof(buf));
	EXPECT_TRUE(strlen(buf) < sizeof(buf) && strstr(buf, "'add', 'xxx") && strstr(buf, "x')"));
	char tiny[12] = "";
	tiny[11] = '#';
	cuda_op_log_describe(&log, tiny, 11);
	EXPECT_STR(tiny, "one of the");
	EXPECT_TRUE(tiny[11] == '#');
}

static void test_sticky(void)
{
	/* the faults cuda.h documents as losing the context */
	const CUresult lost[] = {226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721};
	for (size_t i = 0; i < sizeof(lost) / sizeof(lost[0]); i++)
		EXPECT_TRUE(cuda_error_is_sticky(lost[i]));
	/* errors a later call survives: invalid value, out of memory, out of resources, not ready */
	const CUresult kept[] = {0, 1, 2, 701, 600, 720, 999};
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		EXPECT_TRUE(!cuda_error_is_sticky(kept[i]));
}

int main(void)
{
	test_describe();
	test_sticky();
	return *c_test_failures() != 0;
}
