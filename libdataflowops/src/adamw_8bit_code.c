/* The dynamic code of 8-bit optimizer state (dataflow/ops.h has the definition). */
#include <math.h>
#include <stdlib.h>

#include "dataflow/default_ops.h"
#include "dataflow/ops.h"

static int ascending(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void dataflow_adamw_8bit_dynamic_code(int is_signed, float *code)
{
	double values[DATAFLOW_ADAMW_8BIT_CODES];
	int count = 0;
	for (int i = 0; i < 7; i++) {
		int items = (1 << (is_signed ? i : i + 1)) + 1;
		double step = 0.9 / (items - 1), magnitude = pow(10.0, i - 6);
		for (int j = 0; j + 1 < items; j++) {
			double mean = ((0.1 + j * step) + (0.1 + (j + 1) * step)) / 2.0;
			values[count++] = mean * magnitude;
			if (is_signed)
				values[count++] = -(mean * magnitude);
		}
	}
	values[count++] = 0.0;
	values[count++] = 1.0;
	qsort(values, (size_t)count, sizeof(double), ascending);
	for (int i = 0; i < count; i++)
		code[i] = (float)values[i];
}
