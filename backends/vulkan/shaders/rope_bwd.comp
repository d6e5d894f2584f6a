#version 460
// rope_bwd: rope.glsl with IN = dy, OUT = dx and sin negated (the inverse rotation).
#include "common.glsl"
#include "op_params.glsl"
layout(push_constant) uniform Args { DATAFLOW_ROPE_BWD_PARAMS(REF(DT_dtype)) } p;
#define IN dy
#define OUT dx
#define SIGN -1.0
#include "rope.glsl"
