#version 460
// rope: rope.glsl with IN = x, OUT = out.
#include "common.glsl"
#include "op_params.glsl"
layout(push_constant) uniform Args { DATAFLOW_ROPE_PARAMS(REF(DT_dtype)) } p;
#define IN x
#define OUT out_
#define SIGN 1.0
#include "rope.glsl"
