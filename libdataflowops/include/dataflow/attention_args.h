#ifndef DATAFLOW_ATTENTION_ARGS_H
#define DATAFLOW_ATTENTION_ARGS_H

/* For backends' attention kernels: attention is attention_kv with the queries' sequences as the
 * keys', so one implementation serves both from attention_kv's arguments. */

#include "dataflow/op_args.h"

static inline Dataflow_Attention_Kv_Args dataflow_attention_as_kv_args(void *const *args)
{
	Dataflow_Attention_Args a = dataflow_attention_args(args);
	return (Dataflow_Attention_Kv_Args){.q = a.q, .k = a.k, .v = a.v, .cu_seqlens_q = a.cu_seqlens,
					    .cu_seqlens_k = a.cu_seqlens, .out = a.out, .lse = a.lse,
					    .total_q = a.total_tokens, .total_k = a.total_tokens,
					    .num_seqs = a.num_seqs, .num_q_heads = a.num_q_heads,
					    .num_kv_heads = a.num_kv_heads, .head_dim = a.head_dim, .scale = a.scale,
					    .causal = a.causal, .window = a.window};
}

#endif
