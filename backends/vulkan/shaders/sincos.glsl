// sin and cos of an fp32 angle a, about 1 ulp for |a| < 2^22 where fma is fused: k = rint(a * 2/pi),
// r = a - k pi/2 with pi/2 in three parts (Cody-Waite, in fma), then the Cephes sinf/cosf
// minimax polynomials on [-pi/4, pi/4] and the quadrant k mod 4. Beyond 2^22 the reduction
// loses bits (results stay in [-1, 1]); rope's angles are position * inv_freq, far below.
vec2 sin_cos(float a)
{
	precise float k = roundEven(a * 0.636619772367581343);
	precise float r = fma(-k, 1.5703125, a);
	r = fma(-k, 4.837512969970703125e-4, r);
	r = fma(-k, 7.54978995489188216e-8, r);
	precise float z = r * r;
	precise float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
	precise float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
			  0.5 * z + 1.0;
	uint q = uint(int64_t(k) & 3);
	vec2 sc = (q & 1u) != 0u ? vec2(c, -s) : vec2(s, c);
	return q >= 2u ? -sc : sc;
}
