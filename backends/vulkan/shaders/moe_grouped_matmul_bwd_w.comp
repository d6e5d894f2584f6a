#version 460
// moe_grouped_matmul_bwd_w: d_w[e] += dy[o[e]:o[e+1]]^T @ x[o[e]:o[e+1]], fp32 accumulation,
// one rounding. A 16 x 16 workgroup owns a tile of expert e's gradient (workgroup z) and walks
// its rows in order; an expert without rows keeps its gradient.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "op_params.glsl"
#define TILE 16
layout(local_size_x = TILE, local_size_y = TILE) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_GROUPED_MATMUL_BWD_W_PARAMS(REF(DT_dtype), REF(DT_grad_dtype)) } p;

shared float dys[TILE][TILE + 1], xs[TILE][TILE + 1]; // [row][n], [row][k]

uint clamp_rows(int o) { return uint(clamp(o, 0, int(p.rows))); }

void main()
{
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, e = gl_WorkGroupID.z;
	uint N = uint(p.n_out), Kd = uint(p.k_in), n_base = gl_WorkGroupID.y * TILE;
	uint n = n_base + ty, k = gl_WorkGroupID.x * TILE + tx;
	uint lo = 0;
	for (uint i = 0; i <= e; i++)
		lo = max(lo, clamp_rows(p.expert_offsets.v[i]));
	uint hi = max(lo, clamp_rows(p.expert_offsets.v[e + 1]));
	if (lo == hi)
		return;
	precise float acc = 0.0;
	for (uint r0 = lo; r0 < hi; r0 += TILE) {
		uint r = min(r0 + ty, hi - 1);
		dys[ty][tx] = r0 + ty < hi && n_base + tx < N ? LOAD(DT_dtype, p.dy.v[r * N + min(n_base + tx, N - 1)]) : 0.0;
		xs[ty][tx] = r0 + ty < hi && k < Kd ? LOAD(DT_dtype, p.x.v[r * Kd + min(k, Kd - 1)]) : 0.0;
		barrier();
		[[unroll]] for (uint rr = 0; rr < TILE; rr++)
			acc += dys[rr][ty] * xs[rr][tx];
		barrier();
	}
	if (n < N && k < Kd) {
		uint at = (e * N + n) * Kd + k;
		precise float g = LOAD(DT_grad_dtype, p.d_w.v[at]) + acc;
		p.d_w.v[at] = STORE(DT_grad_dtype, g);
	}
}
