#version 460
// grad_norm_sq_partials: workspace[b] = sum of x[i]^2 over block b of DATAFLOW_GRAD_NORM_BLOCK
// elements in fp64, the host kernel's order (backends/host/kernels/grad_norm_sq.c): lane k
// of 16 sums the elements k mod 16 of the block in order (x^2 of an fp32 is exact in fp64),
// then the lanes fold as k + k+8, k + k+4, k + k+2, k + k+1: the host's bits. A workgroup is
// 16 lanes (x) by 4 blocks (y), grid-stride over the blocks.
#include "common.glsl"
#include "op_params.glsl"
#define BLOCKS 4
layout(local_size_x = 16, local_size_y = BLOCKS) in;
layout(push_constant) uniform Args { DATAFLOW_GRAD_NORM_SQ_PARTIALS_PARAMS(REF(DT_x_dtype)) } p;

shared double lanes[BLOCKS][16];

void main()
{
	uint l = gl_LocalInvocationID.x, y = gl_LocalInvocationID.y, n = uint(p.n);
	uint blocks = (n + DATAFLOW_GRAD_NORM_BLOCK - 1) / DATAFLOW_GRAD_NORM_BLOCK;
	for (uint base = gl_WorkGroupID.x * BLOCKS; base < blocks; base += gl_NumWorkGroups.x * BLOCKS) {
		uint b = base + y, b0 = b * DATAFLOW_GRAD_NORM_BLOCK;
		bool valid = b < blocks;
		precise double acc = 0.0;
		if (valid)
			for (uint i = b0 + l; i < min(b0 + DATAFLOW_GRAD_NORM_BLOCK, n); i += 16) {
				double v = double(LOAD(DT_x_dtype, p.x.v[i]));
				acc += v * v;
			}
		lanes[y][l] = acc;
		barrier();
		if (valid && l == 0) {
			precise double a[16];
			for (int k = 0; k < 16; k++)
				a[k] = lanes[y][k];
			for (int w = 8; w >= 1; w /= 2)
				for (int k = 0; k < w; k++)
					a[k] += a[k + w];
			p.workspace.v[b] = doubleBitsToUint64(a[0]);
		}
		barrier();
	}
}
