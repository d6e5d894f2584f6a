#ifndef DATAFLOW_TESTS_C_CHECK_H
#define DATAFLOW_TESTS_C_CHECK_H

/* The C tests' status check: a failed call prints where, what and dataflow_last_error(), and
 * ends the test program. */
#include <stdio.h>
#include <stdlib.h>

#include "dataflow/dataflow.h"

#define CHECK(call)                                                                                          \
	do {                                                                                                 \
		Dataflow_Status st_ = (call);                                                                \
		if (st_ != DATAFLOW_OK) {                                                                    \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                 \
				dataflow_last_error());                                                      \
			exit(1);                                                                             \
		}                                                                                            \
	} while (0)

#endif
