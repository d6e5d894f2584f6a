#version 460
// attention_kv_bwd: attention_bwd.glsl with separate query and key offsets, dk and dv added
// into fp32 rows (a context's gradients summed over the chunks that attend to it).
#include "common.glsl"
#include "op_params.glsl"
#include "attention.glsl"
// its int64 scalars as int: the arguments would take 152 bytes, the devices may allow 128
layout(push_constant) uniform Args { DATAFLOW_ATTENTION_KV_BWD_PARAMS_NARROW(REF(DT_dtype)) } p;
#define Q_TOTAL p.total_q
#define K_TOTAL p.total_k
#define CU_Q p.cu_seqlens_q
#define CU_K p.cu_seqlens_k
#define STORE_KV_GRAD(g, i, x) g.v[i] += x
#include "attention_bwd.glsl"
