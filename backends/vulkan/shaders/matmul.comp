#version 460
// matmul: D = alpha * op(A) @ op(B) + beta * C, row-major, fp32 accumulation; op(A) is M x K
// (A stored K x M when trans_a), op(B) K x N (B stored N x K when trans_b). C is read only when
// beta != 0 and may be D.
// Tiled: a workgroup of 16 x 16 threads computes a 64 x 64 tile of D, 4 x 4 per thread, over
// K in steps of 16 whose A and B tiles are staged (converted to fp32) in shared memory.
// Every loop but the one over K is unrolled: lavapipe bounds an invocation's loop iterations
// in all (vulkan_backend.h), so K can reach 16 times that bound.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "op_params.glsl"
#define TILE 64
#define KT 16
layout(local_size_x = 16, local_size_y = 16) in;
layout(push_constant) uniform Args { DATAFLOW_MATMUL_PARAMS(REF(DT_in_dtype), REF(DT_out_dtype)) } p;

shared float As[KT][TILE + 1];
shared float Bs[KT][TILE + 1];

float a_at(uint m, uint k)
{
	if (m >= uint(p.M) || k >= uint(p.K))
		return 0.0;
	return LOAD(DT_in_dtype, p.A.v[p.trans_a != 0 ? k * uint(p.M) + m : m * uint(p.K) + k]);
}

float b_at(uint k, uint n)
{
	if (k >= uint(p.K) || n >= uint(p.N))
		return 0.0;
	return LOAD(DT_in_dtype, p.B.v[p.trans_b != 0 ? n * uint(p.K) + k : k * uint(p.N) + n]);
}

void main()
{
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, t = ty * 16 + tx;
	uint row0 = uint(gl_WorkGroupID.y) * TILE, col0 = uint(gl_WorkGroupID.x) * TILE;
	float acc[4][4];
	[[unroll]] for (int i = 0; i < 4; i++)
		[[unroll]] for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0;
	for (uint k0 = 0; k0 < uint(p.K); k0 += KT) {
		// 256 threads stage 16 x 64 elements of each tile, 4 each
		[[unroll]] for (uint s = 0; s < KT * TILE / 256; s++) {
			uint e = t + s * 256;
			uint kk = e / TILE, mm = e % TILE;
			// A is read along m for trans_a (contiguous there), along k otherwise
			uint ka = p.trans_a != 0 ? kk : e % KT, ma = p.trans_a != 0 ? mm : e / KT;
			As[ka][ma] = a_at(row0 + ma, k0 + ka);
			uint kb = p.trans_b != 0 ? e % KT : kk, nb = p.trans_b != 0 ? e / KT : mm;
			Bs[kb][nb] = b_at(k0 + kb, col0 + nb);
		}
		barrier();
		[[unroll]] for (uint kk = 0; kk < KT; kk++) {
			float a[4], b[4];
			[[unroll]] for (int i = 0; i < 4; i++) {
				a[i] = As[kk][ty + 16 * i];
				b[i] = Bs[kk][tx + 16 * i];
			}
			[[unroll]] for (int i = 0; i < 4; i++)
				[[unroll]] for (int j = 0; j < 4; j++)
					acc[i][j] += a[i] * b[j];
		}
		barrier();
	}
	[[unroll]] for (int i = 0; i < 4; i++) {
		uint m = row0 + ty + 16 * i;
		[[unroll]] for (int j = 0; j < 4; j++) {
			uint n = col0 + tx + 16 * j;
			if (m < uint(p.M) && n < uint(p.N)) {
				float r = p.alpha * acc[i][j];
				if (p.beta != 0.0)
					r += p.beta * LOAD(DT_out_dtype, p.C.v[m * uint(p.N) + n]);
				p.D.v[m * uint(p.N) + n] = STORE(DT_out_dtype, r);
			}
		}
	}
}
