#ifndef DATAFLOW_OPS_H
#define DATAFLOW_OPS_H

#include <stdint.h>

#include "dataflow/handle.h"

/* The default op set. Each op has a skeleton builder (the argument list is the op's
 * contract, shared by every backend) and a dataflow_submit_<op>() that validates shapes,
 * dtypes and buffer extents, then submits on the given stream.
 *
 * A backend provides, in dataflow_handle_default_ops_library(handle), for native ops the kernel symbol
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

/* embedding (native): out[t, :] = table[ids[t], :] for t < num_tokens; out is [num_tokens,
 * hidden], table [vocab, hidden], both dtype (fp32, fp16, bf16); ids int32 or int64. An id
 * outside [0, vocab) gives a zero row (ids live in device memory, so they are not checked
 * here; the Python wrapper checks host ids). out must not overlap table.
 * Args: num_tokens, hidden, vocab, ids, table, out. */
Dataflow_Status dataflow_embedding_skeleton(Op_Skeleton *skeleton, DataflowDatatype id_dtype, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_embedding(Dataflow_Handle *handle, int stream_id, DataflowDatatype id_dtype,
					  DataflowDatatype dtype, int64_t num_tokens, int64_t hidden, int64_t vocab,
					  const void *ids, const void *table, void *out);

/* embedding_bwd_w (native): d_table[ids[t], :] += d_out[t, :] for t < num_tokens, ids outside
 * [0, vocab) skipped. d_out [num_tokens, hidden] is dtype (fp32, fp16, bf16); d_table
 * [vocab, hidden] is grad_dtype (fp32) and accumulates (zero it first for a fresh gradient).
 * Deterministic: each d_table element sums its tokens in token order, in fp32, whatever the
 * thread count. Args: num_tokens, hidden, vocab, ids, d_out, d_table. */
Dataflow_Status dataflow_embedding_bwd_w_skeleton(Op_Skeleton *skeleton, DataflowDatatype id_dtype,
						  DataflowDatatype dtype, DataflowDatatype grad_dtype);
Dataflow_Status dataflow_submit_embedding_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype id_dtype,
						DataflowDatatype dtype, DataflowDatatype grad_dtype, int64_t num_tokens,
						int64_t hidden, int64_t vocab, const void *ids, const void *d_out,
						void *d_table);

/* rope (native), Hugging Face Llama convention (rotate_half pairs i and i + head_dim/2):
 * with a = positions[t] * inv_freq[i] (fp32), c = cos(a), s = sin(a), for every head,
 *   out[t, h, i]       = x[t, h, i] * c - x[t, h, i + head_dim/2] * s
 *   out[t, h, i + d/2] = x[t, h, i + d/2] * c + x[t, h, i] * s
 * x and out are [num_tokens, num_heads, head_dim] of dtype (fp32, fp16, bf16), fp32 math,
 * one rounding; out may equal x (in place). positions int32 [num_tokens] (position ids:
 * packed sequences restart at 0; any value is safe). inv_freq fp32 [head_dim/2], made by
 * dataflow_rope_inv_freq. head_dim even, at most DATAFLOW_ROPE_MAX_HEAD_DIM.
 * Args: num_tokens, num_heads, head_dim, positions, inv_freq, x, out. */
#define DATAFLOW_ROPE_MAX_HEAD_DIM 1024
Dataflow_Status dataflow_rope_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_rope(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t num_tokens,
				     int64_t num_heads, int64_t head_dim, const void *positions, const void *inv_freq,
				     const void *x, void *out);

/* rope_bwd (native): dx = the inverse rotation of dy (rope with s negated), same layout,
 * dtypes and aliasing as rope. Args: num_tokens, num_heads, head_dim, positions, inv_freq, dy, dx. */
Dataflow_Status dataflow_rope_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_rope_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					 int64_t num_tokens, int64_t num_heads, int64_t head_dim, const void *positions,
					 const void *inv_freq, const void *dy, void *dx);

/* Host helper for rope: inv_freq[i] = 1 / theta^(2i / head_dim) for i < head_dim/2, then, when
 * factor != 0, Llama-3 scaling exactly as Hugging Face's _compute_llama3_parameters (fp32):
 * wavelengths above original_max_position_embeddings / low_freq_factor are divided by factor,
 * those below original_max_position_embeddings / high_freq_factor kept, those between
 * interpolated smoothly. factor == 0 gives the default (unscaled) frequencies. inv_freq is host
 * memory of head_dim/2 floats; upload it for the op. */
Dataflow_Status dataflow_rope_inv_freq(int64_t head_dim, float theta, float factor, float low_freq_factor,
				       float high_freq_factor, float original_max_position_embeddings, float *inv_freq);

/* adamw_step (native): one torch.optim.AdamW step (decoupled weight decay, bias correction,
 * no amsgrad) over n elements, in torch's _single_tensor_adam order, fp32 arithmetic:
 *   g = grad * scale[0]                        (scale may be NULL: g = grad)
 *   p = p * (1 - lr * weight_decay)
 *   m = lerp(m, g, 1 - beta1)                  (torch's lerp: fma(w, g - m, m) for w < 0.5)
 *   v = fma((1 - beta2) * g, g, v * beta2)     (torch's addcmul)
 *   p = p + (-lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * Host scalars are doubles (as torch's Python floats); the per-step constants are formed in
 * double and rounded once to fp32, as torch does. m and v are fp32. param is fp32 or bf16;
 * grad fp32 or bf16. master (fp32, only with a bf16 param, may be NULL): when given, p is the
 * master copy, updated in fp32, and param receives it rounded to bf16 (RNE); when NULL a bf16
 * param is read, updated in fp32 and rounded back. scale is a device fp32 [1] (for example
 * written by clip_by_global_norm), so clipping needs no host round trip. No aliasing between
 * tensors. Requires lr >= 0, 0 <= beta1, beta2 < 1, eps >= 0, weight_decay >= 0, step >= 1.
 * Args: n, param, grad, m, v, master, scale, lr, beta1, beta2, eps, weight_decay, step. */
Dataflow_Status dataflow_adamw_step_skeleton(Op_Skeleton *skeleton, DataflowDatatype param_dtype,
					     DataflowDatatype grad_dtype);
Dataflow_Status dataflow_submit_adamw_step(Dataflow_Handle *handle, int stream_id, DataflowDatatype param_dtype,
					   DataflowDatatype grad_dtype, int64_t n, void *param, const void *grad, void *m,
					   void *v, void *master, const void *scale, double lr, double beta1,
					   double beta2, double eps, double weight_decay, int64_t step);

/* grad_norm_sq: out[0] = (accumulate ? out[0] : 0) + sum_i x[i]^2 over n elements of x (fp32,
 * bf16), accumulated in fp64; out is fp32 or fp64 [1]. Deterministic for any thread count:
 * x is cut into blocks of DATAFLOW_GRAD_NORM_BLOCK elements, each summed in a fixed order
 * into workspace[b] (fp64), then the partials are added in block order and once to out.
 * A global norm over many tensors is one submit per tensor with accumulate = 1 after the
 * first. Submits two native ops on the stream, in order:
 *   grad_norm_sq_partials  Args: n, x, workspace
 *   grad_norm_sq_reduce    Args: num_blocks, workspace, out, accumulate
 * workspace must hold dataflow_grad_norm_sq_workspace_bytes(n) bytes and may be reused by
 * the next submit on the same stream. */
#define DATAFLOW_GRAD_NORM_BLOCK 8192
int64_t dataflow_grad_norm_sq_workspace_bytes(int64_t n);
Dataflow_Status dataflow_grad_norm_sq_partials_skeleton(Op_Skeleton *skeleton, DataflowDatatype x_dtype);
Dataflow_Status dataflow_grad_norm_sq_reduce_skeleton(Op_Skeleton *skeleton, DataflowDatatype out_dtype);
Dataflow_Status dataflow_submit_grad_norm_sq(Dataflow_Handle *handle, int stream_id, DataflowDatatype x_dtype,
					     DataflowDatatype out_dtype, int64_t n, const void *x, void *workspace,
					     void *out, int accumulate);

/* clip_by_global_norm (native): from a sum of squares (grad_norm_sq's out, fp32 or fp64 [1]),
 * as torch.nn.utils.clip_grad_norm_ does in fp32:
 *   norm = sqrt(sumsq); scale = min(1, (1 / (norm + 1e-6)) * max_norm)
 * (NaN stays NaN, as torch's clamp). Writes the device fp32 [1] scale, which adamw_step reads
 * as its scale argument (the gradients themselves are not touched), and norm (fp32 [1],
 * may be NULL). Requires max_norm > 0. Args: sumsq, max_norm, scale, norm. */
Dataflow_Status dataflow_clip_by_global_norm_skeleton(Op_Skeleton *skeleton, DataflowDatatype sumsq_dtype);
Dataflow_Status dataflow_submit_clip_by_global_norm(Dataflow_Handle *handle, int stream_id,
						    DataflowDatatype sumsq_dtype, const void *sumsq, double max_norm,
						    void *scale, void *norm);
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

/* attention_kv (native, forward only): attention with separate query and key sequences, as
 * FlashAttention's varlen API with cu_seqlens_q and cu_seqlens_k, e.g. new tokens attending
 * over a KV cache that already holds them.
 *   Q, out   [total_q][num_q_heads][head_dim]   dtype (fp32, fp16, bf16)
 *   K, V     [total_k][num_kv_heads][head_dim]  dtype
 *   cu_seqlens_q, cu_seqlens_k int32 [num_seqs + 1]: sequence s has queries
 *            [cu_q[s], cu_q[s + 1]) and keys [cu_k[s], cu_k[s + 1])
 *   lse      fp32 [num_q_heads][total_q]
 * Causal masking is aligned bottom-right: query i (0-based within its sequence) of a sequence
 * with q_len queries and k_len keys sees keys j <= i + (k_len - q_len). A query that sees no
 * key (q_len > k_len) gets out = 0 and lse = -inf. With cu_seqlens_k = cu_seqlens_q this is
 * attention. Both offset arrays are untrusted device data with attention's clamping rules.
 * Args: q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, total_q, total_k, num_seqs,
 * num_q_heads, num_kv_heads, head_dim, scale, causal. */
Dataflow_Status dataflow_attention_kv_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_attention_kv(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					     const void *q, const void *k, const void *v, const void *cu_seqlens_q,
					     const void *cu_seqlens_k, void *out, void *lse, int64_t total_q,
					     int64_t total_k, int64_t num_seqs, int64_t num_q_heads, int64_t num_kv_heads,
					     int64_t head_dim, float scale, int causal);

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

/* rms_norm (native), as Hugging Face LlamaRMSNorm: per row of x [rows, hidden], in fp32,
 *   rstd = 1 / sqrt(mean(x^2) + eps),   y = w * to_dtype(x * rstd)
 * where the normalized row is rounded to x's dtype before the weight multiply and the
 * product is rounded again ("weight * hidden_states.to(input_dtype)"; for fp32 both roundings
 * are exact). x, w, y share dtype (fp32, fp16, bf16); w is [hidden]; rstd is fp32 [rows],
 * saved for the backward. y may alias x. Args: rows, hidden, eps, x, w, y, rstd. */
Dataflow_Status dataflow_rms_norm_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_rms_norm(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					 int64_t rows, int64_t hidden, float eps, const void *x, const void *w,
					 void *y, void *rstd);

/* rms_norm_bwd_x (native): per row, in fp32 with g = dy * w,
 *   dx = rstd * (g - x * rstd^2 * mean(g * x))
 * rounded once to the dtype (the gradient of y = w * x * rstd; the forward's rounding of the
 * normalized row is passed straight through). dy, x, w, dx share dtype; rstd is the
 * forward's fp32 [rows]. dx may alias dy or x. Args: rows, hidden, dy, x, w, rstd, dx. */
Dataflow_Status dataflow_rms_norm_bwd_x_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_rms_norm_bwd_x(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       int64_t rows, int64_t hidden, const void *dy, const void *x,
					       const void *w, const void *rstd, void *dx);

/* rms_norm_bwd_w: dw[j] = sum over rows r of dy[r, j] * (x[r, j] * rstd[r]), deterministic:
 * the same bits for any thread count. Two native ops, submitted in order on the stream:
 *   rms_norm_bwd_w_partials (args: rows, hidden, dy, x, rstd, workspace): for each block b of
 *     DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows (the last may be shorter),
 *     workspace[b, j] = fp32 sum over the block's rows in row order;
 *   rms_norm_bwd_w_reduce (args: rows, hidden, workspace, dw): dw[j] = fp32 sum over b in
 *     order of workspace[b, j], rounded once to dw's dtype.
 * dy and x share dtype (fp32, fp16, bf16); dw is that dtype or fp32; workspace is fp32
 * [ceil(rows / BLOCK_ROWS), hidden] of dataflow_rms_norm_bwd_w_workspace_bytes() bytes,
 * owned by the caller and untouched by other work until the reduce has run. */
#define DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS 64
/* Bytes of fp32 workspace rms_norm_bwd_w needs; 0 if rows or hidden is not positive. */
int64_t dataflow_rms_norm_bwd_w_workspace_bytes(int64_t rows, int64_t hidden);
Dataflow_Status dataflow_rms_norm_bwd_w_partials_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_rms_norm_bwd_w_reduce_skeleton(Op_Skeleton *skeleton, DataflowDatatype dw_dtype);
Dataflow_Status dataflow_submit_rms_norm_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       DataflowDatatype dw_dtype, int64_t rows, int64_t hidden, const void *dy,
					       const void *x, const void *rstd, void *workspace, void *dw);

/* swiglu (native), as Hugging Face LlamaMLP's act_fn(gate) * up: in fp32,
 *   out = to_dtype(to_dtype(silu(gate)) * up),   silu(g) = g * sigmoid(g)
 * (silu rounded to the dtype before the multiply, as F.silu(gate) * up does in bf16/fp16;
 * sigmoid from exp(-|g|), which cannot overflow).
 * gate, up, out [rows, ffn] share dtype (fp32, fp16, bf16); out may alias gate or up.
 * Args: rows, ffn, gate, up, out. */
Dataflow_Status dataflow_swiglu_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_swiglu(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype, int64_t rows,
				       int64_t ffn, const void *gate, const void *up, void *out);

/* swiglu_bwd (native): in fp32 with s = sigmoid(gate), each rounded once,
 *   d_up = d_out * silu(gate),   d_gate = d_out * up * s * (1 + gate * (1 - s))
 * (the gradient of silu(gate) * up; the forward's rounding of silu is passed straight
 * through). All [rows, ffn], one dtype. d_gate and d_up may alias any input but not each
 * other. Args: rows, ffn, d_out, gate, up, d_gate, d_up. */
Dataflow_Status dataflow_swiglu_bwd_skeleton(Op_Skeleton *skeleton, DataflowDatatype dtype);
Dataflow_Status dataflow_submit_swiglu_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					   int64_t rows, int64_t ffn, const void *d_out, const void *gate,
					   const void *up, void *d_gate, void *d_up);

#endif
