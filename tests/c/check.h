#ifndef DATAFLOW_TEST_CHECK_H
#define DATAFLOW_TEST_CHECK_H

/* The CUDA backend's host-side C tests' assertions: a failed check prints its place and
 * condition and is counted; main ends with `return check_report("what was tested");`. */

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                        \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			check_failures++;                                                  \
		}                                                                          \
	} while (0)

/* Strings equal, printing both when not. */
#define CHECK_STR(got, want)                                                                          \
	do {                                                                                          \
		if (strcmp((got), (want)) != 0) {                                                     \
			fprintf(stderr, "%s:%d: got \"%s\", want \"%s\"\n", __FILE__, __LINE__, got, want); \
			check_failures++;                                                             \
		}                                                                                     \
	} while (0)

static inline int check_report(const char *what)
{
	if (check_failures)
		fprintf(stderr, "%s: %d check(s) failed\n", what, check_failures);
	else
		printf("%s: all checks passed\n", what);
	return check_failures != 0;
}

#endif
