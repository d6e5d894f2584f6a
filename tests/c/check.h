#ifndef DATAFLOW_TESTS_C_CHECK_H
#define DATAFLOW_TESTS_C_CHECK_H

/* The C tests' status check: a failed call prints where, what and dataflow_last_error(), and
 * ends the test program. */
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/dataflow.h"

static inline void check_status(Dataflow_Status status, const char *file, int line, const char *call)
{
	if (status == DATAFLOW_OK)
		return;
	fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, dataflow_last_error());
	exit(1);
}

#define CHECK(call) check_status((call), __FILE__, __LINE__, #call)

#endif
