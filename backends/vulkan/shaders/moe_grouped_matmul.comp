#version 460
// moe_grouped_matmul: out[r] = x[r] @ op(W[e]) for o[e] <= r < o[e + 1], fp32 accumulation, one
// rounding (as the host and cuda). A 16 x 16 workgroup owns TILE rows and TILE columns and runs
// every expert whose rows (the offsets clamped into [0, rows] and made non-decreasing) meet
// its rows, each invocation keeping its own row's result; the loop is uniform per workgroup.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "op_params.glsl"
#define TILE 16
layout(local_size_x = TILE, local_size_y = TILE) in;
layout(push_constant) uniform Args { DATAFLOW_MOE_GROUPED_MATMUL_PARAMS(REF(DT_dtype)) } p;

shared float xs[TILE][TILE + 1], ws[TILE][TILE + 1]; // xs[row][k], ws[k][col]

uint clamp_rows(int o) { return uint(clamp(o, 0, int(p.rows))); }

void main()
{
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	uint r_base = gl_WorkGroupID.y * TILE, c_base = gl_WorkGroupID.x * TILE;
	uint r = r_base + ty, col = c_base + tx, N = uint(p.n_out), Kd = uint(p.k_in);
	uint lo = 0;
	for (uint e = 0; e < uint(p.experts) && lo < r_base + TILE; e++) {
		lo = max(lo, clamp_rows(p.expert_offsets.v[e]));
		uint hi = max(lo, clamp_rows(p.expert_offsets.v[e + 1]));
		if (hi <= r_base || lo == hi)
			continue;
		uint we = e * N * Kd;
		precise float acc = 0.0;
		for (uint k0 = 0; k0 < Kd; k0 += TILE) {
			xs[ty][tx] = r < hi && k0 + tx < Kd ? LOAD(DT_dtype, p.x.v[min(r, uint(p.rows) - 1) * Kd + min(k0 + tx, Kd - 1)]) : 0.0;
			if (p.trans_w != 0) // W[e] is [n_out, k_in]: read along k
				ws[tx][ty] = c_base + ty < N && k0 + tx < Kd ? LOAD(DT_dtype, p.w.v[we + min(c_base + ty, N - 1) * Kd + min(k0 + tx, Kd - 1)]) : 0.0;
			else // W[e] is [k_in, n_out]
				ws[ty][tx] = k0 + ty < Kd && col < N ? LOAD(DT_dtype, p.w.v[we + min(k0 + ty, Kd - 1) * N + min(col, N - 1)]) : 0.0;
			barrier();
			[[unroll]] for (uint kk = 0; kk < TILE; kk++)
				acc += xs[ty][kk] * ws[kk][tx];
			barrier();
		}
		if (r >= lo && r < hi && col < N)
			p.out_.v[r * N + col] = STORE(DT_dtype, acc);
		lo = hi;
	}
}
