/* The reduction of a collective: contributions added in rank order, element by element, so
 * that the result is a function of the inputs and the rank count alone. */
#include "comm_internal.h"

#define RANK_ORDER_REDUCE(T, load, store)                                                                  \
	do {                                                                                               \
		for (int64_t i = 0; i < count; i++) {                                                      \
			T acc = load(srcs[0], i);                                                          \
			for (int r = 1; r < n; r++)                                                        \
				acc += load(srcs[r], i);                                                   \
			store(out, i, op == DATAFLOW_REDUCE_AVG ? acc / (T)n : acc);                       \
		}                                                                                          \
	} while (0)

#define LOAD_F32(p, i) (((const float *)(p))[i])
#define STORE_F32(p, i, x) (((float *)(p))[i] = (x))
#define LOAD_F64(p, i) (((const double *)(p))[i])
#define STORE_F64(p, i, x) (((double *)(p))[i] = (x))
#define LOAD_BF16(p, i) dataflow_bf16_to_fp32(((const uint16_t *)(p))[i])
#define STORE_BF16(p, i, x) (((uint16_t *)(p))[i] = dataflow_fp32_to_bf16(x))

void rank_order_reduce(DataflowDatatype dtype, const void *const *srcs, int n, int64_t count, void *out,
		       Dataflow_Reduce_Op op)
{
	/* out may alias a source: each element reads every source before it is written */
	switch (dtype) {
	case DATAFLOW_FP64:
		RANK_ORDER_REDUCE(double, LOAD_F64, STORE_F64);
		break;
	case DATAFLOW_BF16:
		RANK_ORDER_REDUCE(float, LOAD_BF16, STORE_BF16);
		break;
	default: /* fp32: comm.c admits no other reduction dtype */
		RANK_ORDER_REDUCE(float, LOAD_F32, STORE_F32);
		break;
	}
}
