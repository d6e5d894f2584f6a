// exp(x) for x <= 0, the host kernels' (backends/host/kernels/simd_exp.h) step for step:
// n = rint(x / ln2) by the 1.5 * 2^23 trick, r = x - n ln2 (Cody-Waite, ln2 in two parts),
// exp(r) = 1 + r + r^2 P(r) (degree-5 Cephes minimax), 2^n built in the exponent field, all in
// fma: the host's bits where the device fuses fma, an ulp or two off where it does not
// (lavapipe). x < -87.33 (and -Inf) gives 0.
float exp_nonpos(float x)
{
	if (x < -87.33)
		return 0.0;
	precise float t = fma(x, 1.44269504088896341, 12582912.0);
	precise float n = t - 12582912.0;
	precise float r = fma(-n, 0.693359375, x);
	r = fma(-n, -2.12194440e-4, r);
	precise float y = fma(1.9875691500e-4, r, 1.3981999507e-3);
	y = fma(y, r, 8.3334519073e-3);
	y = fma(y, r, 4.1665795894e-2);
	y = fma(y, r, 1.6666665459e-1);
	y = fma(y, r, 5.0000001201e-1);
	y = fma(y, r * r, r) + 1.0;
	precise float e = y * uintBitsToFloat((floatBitsToUint(t) - 0x4B400000u + 127u) << 23);
	return e;
}
