// Weight-only dequantize-matmul, as the host kernel (backends/host/kernels/qmatmul.c), one
// invocation per output (m, n): w = (code - zero) * scale rounded once, lane l = k mod 16 of 16
// accumulators takes fma(x[k], w, acc[l]) in k order, the lanes are added pairwise (8, 4, 2, 1),
// C added, out rounded once: the host's operations in the host's order. The including shader
// declares the push constants p (x, C, out_, M, N, K) and code_at, zero_at, scale_at(n, k).

#extension GL_EXT_control_flow_attributes : require

float weight(uint n, uint k)
{
	precise float w = (code_at(n, k) - zero_at(n, k)) * scale_at(n, k);
	return w;
}

void main()
{
	uint K = uint(p.K), N = uint(p.N), k16 = K / 16 * 16;
	FOR_EACH_INDEX(i, p.M * p.N) {
		uint m = i / N, n = i % N;
		precise float acc[16];
		[[unroll]] for (int l = 0; l < 16; l++)
			acc[l] = 0.0;
		for (uint k0 = 0; k0 < k16; k0 += 16)
			[[unroll]] for (uint l = 0; l < 16; l++)
				acc[l] = fma(LOAD(DT_x_dtype, p.x.v[m * K + k0 + l]), weight(n, k0 + l), acc[l]);
		for (uint k = k16; k < K; k++)
			acc[k % 16] = fma(LOAD(DT_x_dtype, p.x.v[m * K + k]), weight(n, k), acc[k % 16]);
		[[unroll]] for (int width = 8; width >= 1; width /= 2)
			[[unroll]] for (int l = 0; l < width; l++)
				acc[l] += acc[l + width];
		precise float r = acc[0];
		if (uint64_t(p.C) != 0ul)
			r += LOAD(DT_out_dtype, p.C.v[i]);
		p.out_.v[i] = STORE(DT_out_dtype, r);
	}
}
