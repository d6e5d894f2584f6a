#ifndef DATAFLOW_OPS_H
#define DATAFLOW_OPS_H

#include <stdint.h>

#include "dataflow/handle.h"

/* The default op set. Each op has a skeleton builder (the argument list is the op's
 * contract, shared by every backend) and a dataflow_submit_<op>() that validates shapes,
 * dtypes and buffer extents, then submits on the given stream.
 *
 * A backend provides, in handle->default_ops_library, for native ops the kernel symbol
 * dataflow_<backend>_<op>_<variant> and the launch symbol dataflow_<backend>_<op>_launch;
 * for external ops dataflow_<backend>_<op> and dataflow_<backend>_<op>_init. */

/* Registers every default op variant on the handle. */
Dataflow_Status dataflow_register_default_ops(Dataflow_Handle *handle);

/* matmul (external): D = alpha * op(A) @ op(B) + beta * C, row-major, fp32 accumulation.
 * op(A) is M x K (A stored K x M when trans_a), op(B) is K x N (B stored N x K when trans_b),
 * C and D are M x N. A and B share in_dtype (fp32, fp16, bf16); C and D share out_dtype
 * (fp32 or in_dtype). C may be NULL when beta == 0 and may equal D.
 * Args: A, B, C, D, M, N, K, trans_a, trans_b, alpha, beta. */
Dataflow_Status dataflow_matmul_skeleton(Op_Skeleton *skeleton, DataflowDatatype in_dtype,
					 DataflowDatatype out_dtype);
Dataflow_Status dataflow_submit_matmul(Dataflow_Handle *handle, int stream_id, DataflowDatatype in_dtype,
				       DataflowDatatype out_dtype, const void *A, const void *B, const void *C,
				       void *D, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
				       float alpha, float beta);

/* add (native): out = alpha * a + beta * b elementwise over n elements (axpby), one dtype
 * (fp32, fp16, bf16), fp32 arithmetic. out may alias a or b.
 * Args: n, alpha, a, beta, b, out. */
Dataflow_Status dataflow_add_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_add(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t n,
				    float alpha, const void *a, float beta, const void *b, void *out);

/* cast (native): dst = convert(src) over n elements, round-to-nearest-even, between fp32,
 * fp16, bf16, fp8e4m3 and fp8e5m2. Args: n, src, dst. */
Dataflow_Status dataflow_cast_skeleton(Op_Skeleton *skeleton, DataflowDatatype src_dtype,
				       DataflowDatatype dst_dtype);
Dataflow_Status dataflow_submit_cast(Dataflow_Handle *handle, int stream_id, DataflowDatatype src_dtype,
				     DataflowDatatype dst_dtype, int64_t n, const void *src, void *dst);

/* set_mem (native): x[i] = value (rounded to dtype) for i < n; dtype fp32, fp16, bf16.
 * Args: n, value, x. (The handle's set_mem entry fills bytes; this op fills typed values.) */
Dataflow_Status dataflow_set_mem_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_set_mem(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t n,
					float value, void *x);

/* cross_entropy (native), softmax fused, forward and backward in one call, per token row t
 * of logits [tokens, vocab] (fp32, fp16, bf16) with fp32 arithmetic:
 *   loss[t] = logsumexp(logits[t]) - logits[t, labels[t]]                (fp32 [tokens])
 *   dlogits[t] = scale * (softmax(logits[t]) - onehot(labels[t]))        (logits' dtype)
 * scale is e.g. 1 / (number of valid tokens) for a mean loss. labels are int32 [tokens] in
 * device memory (never read by this layer); a row whose label equals ignore_index or lies
 * outside [0, vocab) gets loss 0 and an all-zero dlogits row, and is never read out of
 * bounds. dlogits may be logits (in place) but must not otherwise overlap it.
 * Args: tokens, vocab, ignore_index, scale, logits, labels, loss, dlogits. */
Dataflow_Status dataflow_cross_entropy_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_cross_entropy(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      int64_t tokens, int64_t vocab, int32_t ignore_index, float scale,
					      const void *logits, const int32_t *labels, float *loss, void *dlogits);

#endif
