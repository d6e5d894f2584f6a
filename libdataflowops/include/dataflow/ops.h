#ifndef DATAFLOW_OPS_H
#define DATAFLOW_OPS_H

#include <stdint.h>

#include "dataflow/default_ops.h"
#include "dataflow/handle.h"

/* The default op set: the catalogue's ops (dataflow/default_ops.h, generated from
 * libdataflowops/catalogue.toml: one skeleton builder and one dataflow_submit_<op> each,
 * whose argument list is the op's contract on every backend), the composite ops below (each
 * submits two catalogue ops) and host-side helpers.
 *
 * A backend provides, in its default ops library (dataflow_handle_default_ops_library), for
 * a native op the kernel symbol dataflow_<backend>_<op>_<variant> per variant and the launch
 * symbol dataflow_<backend>_<op>_launch; for an external op dataflow_<backend>_<op> and
 * dataflow_<backend>_<op>_init (dataflow/op_catalogue.h). */

/* Registers every default op variant the backend's library provides on the handle: an op
 * whose launch (native) or init (external) symbol the library lacks is left out; a provided
 * op must provide every variant. */
Dataflow_Status dataflow_register_default_ops(Dataflow_Handle *handle);

/* RoPE frequency schemes: Hugging Face's rope_type values this library computes. */
typedef enum {
	DATAFLOW_ROPE_DEFAULT = 0,
	DATAFLOW_ROPE_LINEAR = 1, /* inv_freq / factor */
	DATAFLOW_ROPE_LLAMA3 = 2, /* _compute_llama3_parameters */
	DATAFLOW_ROPE_YARN = 3,   /* _compute_yarn_parameters */
} Dataflow_Rope_Type;

/* A rope_type with its parameters (HF rope_scaling / rope_parameters names). */
typedef struct {
	int type; /* Dataflow_Rope_Type */
	float theta;
	float factor;                              /* linear, llama3, yarn: > 0 */
	float low_freq_factor, high_freq_factor;   /* llama3 */
	float original_max_position_embeddings;    /* llama3, yarn */
	float beta_fast, beta_slow;                /* yarn; 0: HF's 32 and 1 */
	float attention_factor;                    /* yarn; 0: from factor, mscale, mscale_all_dim as HF */
	float mscale, mscale_all_dim;              /* yarn; 0: not given */
	int truncate;                              /* yarn: floor/ceil the correction range (HF's default) */
} Dataflow_Rope_Scaling;

/* Host helper for rope: inv_freq[i] = 1 / theta^(2i / head_dim) for i < head_dim/2, then the
 * scheme's scaling exactly as Hugging Face's ROPE_INIT_FUNCTIONS compute it in fp32 (llama3:
 * wavelengths above original_max_position_embeddings / low_freq_factor divided by factor,
 * those below original_max_position_embeddings / high_freq_factor kept, those between
 * interpolated; linear: all divided by factor; yarn: interpolated and extrapolated frequencies
 * blended over the correction range of beta_fast..beta_slow rotations). inv_freq is host memory
 * of head_dim/2 floats; upload it for the op. *attention_factor (may be NULL) gets the factor HF
 * multiplies cos and sin by (yarn's mscale; 1 otherwise): scale the attention scores by its
 * square. */
Dataflow_Status dataflow_rope_inv_freq(int64_t head_dim, const Dataflow_Rope_Scaling *scaling, float *inv_freq,
				       float *attention_factor);

/* grad_norm_sq: out[0] = (accumulate ? out[0] : 0) + sum_i x[i]^2 over n elements of x (fp32,
 * bf16), accumulated in fp64; out is fp32 or fp64 [1]. Deterministic for any thread count:
 * x is cut into blocks of DATAFLOW_GRAD_NORM_BLOCK elements, each summed in a fixed order
 * into workspace[b] (fp64), then the partials are added in block order and once to out.
 * A global norm over many tensors is one submit per tensor with accumulate = 1 after the
 * first. Submits grad_norm_sq_partials then grad_norm_sq_reduce on the stream (both or
 * neither). workspace must hold dataflow_grad_norm_sq_workspace_bytes(n) bytes and may be
 * reused by the next submit on the same stream. */
Dataflow_Status dataflow_submit_grad_norm_sq(Dataflow_Handle *handle, int stream_id, DataflowDatatype x_dtype,
					     DataflowDatatype out_dtype, int64_t n, const void *x, void *workspace,
					     void *out, int accumulate);
/* Bytes of fp64 workspace grad_norm_sq needs for n elements; 0 if n is not positive. */
int64_t dataflow_grad_norm_sq_workspace_bytes(int64_t n);

/* attention_bwd: gradients of attention (same shapes, layouts and cu_seqlens rules) given
 * dout = dL/dout and the forward's out and lse:
 *   p_ij = exp(s_ij - lse_i),  D_i = dout_i . out_i,  ds_ij = p_ij (dout_i . v_j - D_i)
 *   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,  dv_j = sum_i p_ij dout_i
 * with the sums over i of dk, dv running over all query heads sharing the kv head. Results
 * are deterministic: the same bits for any thread count. dq, dk, dv are overwritten. window:
 * attention's sliding window (0: none; > 0 needs causal).
 * workspace: at least dataflow_attention_bwd_workspace_bytes(...) bytes of device memory
 * (holds D). Submits attention_bwd_delta, then the attention_bwd op, in stream order (both or
 * neither). */
Dataflow_Status dataflow_submit_attention_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					      const void *dout, const void *q, const void *k, const void *v,
					      const void *out, const void *lse, const void *cu_seqlens, void *dq,
					      void *dk, void *dv, void *workspace, int64_t workspace_bytes,
					      int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					      int64_t num_kv_heads, int64_t head_dim, float scale, int causal,
					      int64_t window);
/* attention_kv_bwd: gradients of attention_kv (same shapes, bottom-right causal masking and
 * offset rules) given dout and the forward's out and lse, with attention_bwd's formulas. dq
 * (dtype) is overwritten; dk and dv are fp32 and ACCUMULATED: dk += this call's dK, so the keys
 * of a K/V context collect the gradients of every chunk that attends over them (zero them
 * before the first). Deterministic. workspace: dataflow_attention_bwd_workspace_bytes(total_q,
 * ...) bytes (holds D). Submits attention_bwd_delta, then the attention_kv_bwd op (both or
 * neither). */
Dataflow_Status dataflow_submit_attention_kv_bwd(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
						 const void *dout, const void *q, const void *k, const void *v,
						 const void *out, const void *lse, const void *cu_seqlens_q,
						 const void *cu_seqlens_k, void *dq, float *dk, float *dv, void *workspace,
						 int64_t workspace_bytes, int64_t total_q, int64_t total_k, int64_t num_seqs,
						 int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, float scale,
						 int causal, int64_t window);
/* Bytes of workspace attention_bwd needs (fp32 [num_q_heads][total_tokens]); -1 when a size
 * is not positive or the bytes overflow int64. */
int64_t dataflow_attention_bwd_workspace_bytes(int64_t total_tokens, int64_t num_seqs, int64_t num_q_heads,
					       int64_t num_kv_heads, int64_t head_dim);

/* paged_attention: queries of a batch of sequences (a few new tokens each, packed as
 * attention_kv's Q) attend over keys and values stored in pages (flash-decoding).
 *   q, out            [total_q][num_q_heads][head_dim]                 dtype (fp32, fp16, bf16)
 *   k_pages, v_pages  [num_pages][page_size][num_kv_heads][head_dim]   dtype
 *   page_table        int32 [batch][max_pages]: sequence b's key j is row j % page_size of
 *                     page page_table[b][j / page_size]
 *   seq_lens          int32 [batch]: sequence b has keys [0, seq_lens[b]), its new tokens'
 *                     keys included (written first, e.g. with paged_kv_write)
 *   cu_seqlens_q      int32 [batch + 1]: sequence b's queries [cu[b], cu[b + 1])
 *   lse               fp32 [num_q_heads][total_q] or NULL
 * Query i of q_len sees keys j <= i + seq_len - q_len (causal, bottom-right, as attention_kv),
 * head h reads kv head h / (num_q_heads / num_kv_heads). Keys are cut in splits of split_size
 * (a multiple of 64): the first op forms per (sequence, kv head, split) the split's partial
 * output, max and sum, the second combines the splits in order. A sequence's result depends on
 * its own length and split_size only, never on the other sequences of the batch; with
 * seq_len <= split_size the host and vulkan kernels give attention_kv's bits (cuda's differ). The tables are device data never read at
 * submit time: offsets are clamped as attention_kv's, a length is clamped to [0, max_pages *
 * page_size], and keys of a page id outside [0, num_pages) or past the table read as NaN (the
 * sequence's output is NaN rather than silently wrong; dataflow.ops.paged_attention checks
 * host tables and names the bad entry). workspace: dataflow_paged_attention_workspace_bytes
 * bytes. Submits paged_attention_partial then paged_attention_combine (both or neither). */
Dataflow_Status dataflow_submit_paged_attention(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
						const void *q, const void *k_pages, const void *v_pages,
						const void *page_table, const void *seq_lens, const void *cu_seqlens_q,
						void *out, float *lse, void *workspace, int64_t workspace_bytes,
						int64_t total_q, int64_t batch, int64_t num_pages, int64_t page_size,
						int64_t max_pages, int64_t num_q_heads, int64_t num_kv_heads,
						int64_t head_dim, int64_t split_size, float scale);
/* Bytes of fp32 workspace paged_attention needs: cdiv(max_pages * page_size, split_size)
 * splits of total_q * num_q_heads * (head_dim + 2) floats; -1 when a size is not positive or
 * the bytes overflow int64. */
int64_t dataflow_paged_attention_workspace_bytes(int64_t total_q, int64_t num_q_heads, int64_t head_dim,
						 int64_t max_pages, int64_t page_size, int64_t split_size);

/* rms_norm_bwd_w: dw[j] = sum over rows r of dy[r, j] * (x[r, j] * rstd[r]), deterministic:
 * the same bits for any thread count. Submits rms_norm_bwd_w_partials (fp32 sums per block of
 * DATAFLOW_RMS_NORM_BWD_W_BLOCK_ROWS rows into workspace) then rms_norm_bwd_w_reduce (the
 * blocks summed in order, rounded once to dw's dtype) on the stream, both or neither.
 * dy and x share dtype (fp32, fp16, bf16); dw is that dtype or fp32; workspace is fp32
 * [ceil(rows / BLOCK_ROWS), hidden] of dataflow_rms_norm_bwd_w_workspace_bytes() bytes,
 * owned by the caller and untouched by other work until the reduce has run. */
Dataflow_Status dataflow_submit_rms_norm_bwd_w(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					       DataflowDatatype dw_dtype, int64_t rows, int64_t hidden, const void *dy,
					       const void *x, const void *rstd, void *workspace, void *dw);
/* Bytes of fp32 workspace rms_norm_bwd_w needs; 0 if rows or hidden is not positive or the
 * bytes overflow int64. */
int64_t dataflow_rms_norm_bwd_w_workspace_bytes(int64_t rows, int64_t hidden);

/* moe_permute: tokens routed to experts, gathered expert by expert. From topk_ids [tokens,
 * top_k] (int32 device data), moe_permute_index writes expert_offsets (int32 [experts + 1]),
 * slot_of (int32 [tokens, top_k]: each assignment's row of x_perm) and row_map (int32
 * [tokens * top_k]: each row's token, -1 past expert_offsets[experts]); then the embedding op
 * gathers x_perm[s, :] = x[row_map[s], :] ([tokens * top_k, hidden], x's dtype fp32, fp16 or
 * bf16; rows past expert_offsets[experts] are zero). Within an expert, rows follow the tokens'
 * order. Nothing is read on the host. Submits both on the stream, or neither. The backward,
 * d_x[t] = sum_j d_x_perm[slot_of[t, j]], is moe_combine with NULL weights. */
Dataflow_Status dataflow_submit_moe_permute(Dataflow_Handle *handle, int stream_id, DataflowDatatype dtype,
					    int64_t tokens, int64_t experts, int64_t top_k, int64_t hidden,
					    const int32_t *topk_ids, const void *x, int32_t *expert_offsets,
					    int32_t *row_map, int32_t *slot_of, void *x_perm);

#endif
