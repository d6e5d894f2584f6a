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

/* attention (native): causal or full softmax attention over variable-length sequences packed
 * along the token axis (FlashAttention's varlen convention), GQA/MQA, fp32 accumulation.
 *   Q, out   [total_tokens][num_q_heads][head_dim]   dtype (fp32, fp16, bf16)
 *   K, V     [total_tokens][num_kv_heads][head_dim]  dtype
 *   cu_seqlens int32 [num_seqs + 1]: sequence s is tokens [cu[s], cu[s + 1])
 *   lse      fp32 [num_q_heads][total_tokens]: natural-log logsumexp of each query's scores
 * For query i of sequence s and head h (kv head h / (num_q_heads / num_kv_heads)):
 *   s_ij = scale * q_i . k_j over keys j of sequence s (causal: j <= i),
 *   out_i = sum_j softmax_j(s_ij) v_j,  lse_i = log sum_j exp(s_ij).
 * cu_seqlens is device data the op never reads at submit time. Kernels clamp offsets to
 * [0, total_tokens] and start each sequence no earlier than the previous one ended, so any
 * content is memory-safe; a decreasing range is empty. Rows of out and lse outside every
 * sequence are not written. head_dim <= DATAFLOW_ATTENTION_MAX_HEAD_DIM.
 * Args: q, k, v, cu_seqlens, out, lse, total_tokens, num_seqs, num_q_heads, num_kv_heads,
 * head_dim, scale, causal. */
#define DATAFLOW_ATTENTION_MAX_HEAD_DIM 256
Dataflow_Status dataflow_attention_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_attention(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					  const void *q, const void *k, const void *v, const void *cu_seqlens,
					  void *out, void *lse, int64_t total_tokens, int64_t num_seqs,
					  int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, float scale,
					  int causal);

/* attention_bwd (native): gradients of attention (same shapes, layouts and cu_seqlens rules)
 * given dout = dL/dout and the forward's out and lse:
 *   p_ij = exp(s_ij - lse_i),  D_i = dout_i . out_i,  ds_ij = p_ij (dout_i . v_j - D_i)
 *   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,  dv_j = sum_i p_ij dout_i
 * with the sums over i of dk, dv running over all query heads sharing the kv head. Results
 * are deterministic: the same bits for any thread count. dq, dk, dv are overwritten.
 * workspace: at least dataflow_attention_bwd_workspace_bytes(...) bytes of device memory
 * (holds D; -1 from the query means invalid sizes). Submits two ops in stream order:
 *   attention_bwd_delta  args: dout, out, D, total_tokens, num_q_heads, head_dim
 *   attention_bwd        args: dout, q, k, v, lse, D, cu_seqlens, dq, dk, dv, total_tokens,
 *                        num_seqs, num_q_heads, num_kv_heads, head_dim, scale, causal */
Dataflow_Status dataflow_attention_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_attention_bwd_delta_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
int64_t dataflow_attention_bwd_workspace_bytes(int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					       int64_t num_kv_heads, int64_t head_dim);
Dataflow_Status dataflow_submit_attention_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      const void *dout, const void *q, const void *k, const void *v,
					      const void *out, const void *lse, const void *cu_seqlens, void *dq,
					      void *dk, void *dv, void *workspace, int64_t workspace_bytes,
					      int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					      int64_t num_kv_heads, int64_t head_dim, float scale, int causal);

#endif
