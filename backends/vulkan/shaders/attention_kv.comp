#version 460
// attention_kv: attention with separate query and key offsets (attention_fwd.glsl).
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
layout(push_constant) uniform Args { DATAFLOW_ATTENTION_KV_PARAMS(REF(DT_dtype)) } p;
#define Q_TOTAL p.total_q
#define K_TOTAL p.total_k
#define CU_Q p.cu_seqlens_q
#define CU_K p.cu_seqlens_k
#include "attention_fwd.glsl"
