#version 460
// attention_bwd: attention_bwd.glsl with the queries' offsets for the keys too, dk and dv
// written in the dtype.
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
// its int64 scalars as int: the arguments would take 136 bytes, the devices may allow 128
layout(push_constant) uniform Args { DATAFLOW_ATTENTION_BWD_PARAMS_NARROW(REF(DT_dtype)) } p;
#define Q_TOTAL p.total_tokens
#define K_TOTAL p.total_tokens
#define CU_Q p.cu_seqlens
#define CU_K p.cu_seqlens
#define STORE_KV_GRAD(g, i, x) g.v[i] = STORE(DT_dtype, x)
#include "attention_bwd.glsl"
