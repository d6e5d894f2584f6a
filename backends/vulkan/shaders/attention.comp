#version 460
// attention: softmax attention over packed variable-length sequences, causal or full, GQA
// (attention_fwd.glsl, with the queries' offsets for the keys too).
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
layout(push_constant) uniform Args { DATAFLOW_ATTENTION_PARAMS(REF(DT_dtype)) } p;
#define Q_TOTAL p.total_tokens
#define K_TOTAL p.total_tokens
#define CU_Q p.cu_seqlens
#define CU_K p.cu_seqlens
#include "attention_fwd.glsl"
